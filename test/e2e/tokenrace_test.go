package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/trust/enrol"
)

// Issuer agents racing to spend one enrolment token, each with the
// issuer agent's grant alone (get and patch on the token Secret, by name:
// no update, no delete, as the reference grants on Secrets): exactly one
// spends it, every other finds it spent, and the API server refuses the
// agent an update of the Secret.
func TestATokenRacedByIssuerAgentsIsSpentOnceWithoutUpdate(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("token-race-%d", time.Now().UnixNano()%1000000)
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	require.NoError(t, cp.Grant(ctx, ns, "issuer", "issuer-enrollment-tokens", ns, rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	issuerCfg, err := cp.ServiceAccountConfig(ctx, ns, "issuer")
	require.NoError(t, err)
	admin, err := client.New(cp.AdminConfig(), client.Options{})
	require.NoError(t, err)

	// The operator's command makes the Secret and the token.
	token, err := (&enrol.Tokens{API: admin, Namespace: ns}).Add(ctx, "grid", "site-b", time.Hour, time.Now())
	require.NoError(t, err)

	const agents = 6
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		results = make([]error, agents)
	)
	for i := range agents {
		api, err := client.New(issuerCfg, client.Options{})
		require.NoError(t, err)
		tokens := &enrol.Tokens{API: api, Namespace: ns}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = tokens.Claim(ctx, "grid", "site-b", token, fmt.Sprintf("key-%d", i), time.Now())
		}()
	}
	close(start)
	wg.Wait()

	spent := 0
	for i, err := range results {
		if err == nil {
			spent++
			continue
		}
		assert.ErrorIs(t, err, enrol.ErrTokenUnknown, "agent %d: the token was spent by another", i)
	}
	assert.Equal(t, 1, spent, "one enrolment per token: %v", results)
	rec, err := (&enrol.Tokens{API: admin, Namespace: ns}).Record(ctx, "grid", "site-b")
	require.NoError(t, err)
	require.NotNil(t, rec, "the winner's claim is registered")
	assert.Regexp(t, `^key-\d$`, rec.KeyFingerprint)

	// The grant holds no update: the spending above was done without it.
	api, err := client.New(issuerCfg, client.Options{})
	require.NoError(t, err)
	var s corev1.Secret
	require.NoError(t, api.Get(ctx, types.NamespacedName{Namespace: ns, Name: enrol.DefaultTokenSecret}, &s))
	err = api.Update(ctx, &s)
	assert.True(t, apierrors.IsForbidden(err), "update on the token Secret is not granted: %v", err)
	err = api.Delete(ctx, &s)
	assert.True(t, apierrors.IsForbidden(err), "delete on the token Secret is not granted: %v", err)
}
