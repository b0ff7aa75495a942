package rotateca

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

func withRotation(r *v1alpha1.CARotationStatus) *v1alpha1.GridNetwork {
	n := &v1alpha1.GridNetwork{}
	n.Status.TrustBundle = &v1alpha1.TrustBundleStatus{Rotation: r}
	return n
}

// A stage is refused until every site is ready for it: switching before
// every site trusts the new CA (and its pods had time to load it), or
// retiring before every site holds a certificate of it.
func TestAStageWaitsForEverySite(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	since := metav1.NewTime(now.Add(-time.Minute))
	added := &v1alpha1.CARotationStatus{Stage: v1alpha1.CARotationAdded, NewCA: "ab", Sites: 3, SitesTrustingNewCA: 2, Since: &since}

	assert.NoError(t, ready(withRotation(nil), StageAdd, 0, now))
	assert.ErrorContains(t, ready(withRotation(nil), StageSwitch, 0, now), "not every site trusts the new CA")
	assert.ErrorContains(t, ready(withRotation(added), StageSwitch, 0, now), "2 of 3 sites trust it")
	added.SitesTrustingNewCA = 3
	assert.ErrorContains(t, ready(withRotation(added), StageSwitch, 2*time.Minute, now), "added 1m0s ago")
	assert.NoError(t, ready(withRotation(added), StageSwitch, time.Minute, now))
	assert.ErrorContains(t, ready(withRotation(added), StageRetire, 0, now), "not every site holds a certificate of the new CA")

	issuing := &v1alpha1.CARotationStatus{Stage: v1alpha1.CARotationIssuing, NewCA: "ab", Sites: 3, SitesTrustingNewCA: 3, SitesOnNewCA: 2}
	assert.ErrorContains(t, ready(withRotation(issuing), StageRetire, 0, now), "2 hold a certificate of it")
	issuing.SitesOnNewCA = 3
	assert.NoError(t, ready(withRotation(issuing), StageRetire, 0, now))
	assert.ErrorContains(t, ready(withRotation(issuing), "rotate", 0, now), "add, switch or retire")

	done, _ := reached(withRotation(issuing), StageSwitch)
	assert.True(t, done)
	done, say := reached(withRotation(added), StageRetire)
	assert.False(t, done)
	assert.Contains(t, say, "stage Added")
}
