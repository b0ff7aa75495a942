package gossip

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// metaVersion is the identity schema on the wire. Every site of a grid
// must speak the same one; a release that changes it is rolled out to the
// whole grid in a coordinated way.
const metaVersion = 1

// nodeMeta is what a member says of itself in memberlist's node metadata
// (at most 512 bytes).
type nodeMeta struct {
	V          int    `json:"v"`
	Site       string `json:"s"`
	Generation uint64 `json:"g"`
	Grid       gridID `json:"grid"`
}

func (m nodeMeta) encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, fmt.Errorf("no metadata")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("metadata: %w", err)
	}
	if m.V != metaVersion {
		return m, fmt.Errorf("identity schema %d, this agent speaks %d", m.V, metaVersion)
	}
	if errs := validation.IsDNS1123Label(m.Site); len(errs) > 0 {
		return m, fmt.Errorf("site %q: %s", truncate(m.Site), errs[0])
	}
	if len(m.Grid.ID) > 64 || len(m.Grid.By) > 63 {
		return m, fmt.Errorf("grid ID of %d bytes", len(m.Grid.ID))
	}
	return m, nil
}

// memberName is the memberlist name of one generation of a site. A site's
// successor (restarted, or another replica elected) joins under a new
// name with a greater generation and supersedes its predecessor at once,
// from any address: memberlist would refuse a second address for one
// name until the first is declared dead. The site is the unit of every
// view; a superseded generation is never counted.
func memberName(site string, generation uint64) string {
	return site + "/" + strconv.FormatUint(generation, 10)
}

// siteOfMember returns the site part of a member name.
func siteOfMember(name string) string {
	site, _, _ := strings.Cut(name, "/")
	return site
}
