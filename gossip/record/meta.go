package record

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MetaVersion is the identity schema on the wire. Every site of a grid
// must speak the same one; a release that changes it is rolled out to the
// whole grid in a coordinated way.
const MetaVersion = 1

// NodeMeta is what a member says of itself in memberlist's node metadata
// (at most 512 bytes).
type NodeMeta struct {
	V          int    `json:"v"`
	Site       string `json:"s"`
	Generation uint64 `json:"g"`
	Grid       GridID `json:"grid"`
}

func (m NodeMeta) Encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

func DecodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if len(b) == 0 {
		return m, fmt.Errorf("no metadata")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("metadata: %w", err)
	}
	if m.V != MetaVersion {
		return m, fmt.Errorf("identity schema %d, this agent speaks %d", m.V, MetaVersion)
	}
	if errs := validation.IsDNS1123Label(m.Site); len(errs) > 0 {
		return m, fmt.Errorf("site %q: %s", TruncateForLog(m.Site), errs[0])
	}
	if len(m.Grid.ID) > 64 || len(m.Grid.By) > 63 {
		return m, fmt.Errorf("grid ID of %d bytes", len(m.Grid.ID))
	}
	return m, nil
}

// MemberName is the memberlist name of one generation of a site. A site's
// successor (restarted, or another replica elected) joins under a new
// name with a greater generation and supersedes its predecessor at once,
// from any address: memberlist would refuse a second address for one
// name until the first is declared dead. The site is the unit of every
// view; a superseded generation is never counted.
func MemberName(site string, generation uint64) string {
	return site + "/" + strconv.FormatUint(generation, 10)
}

// SiteOfMember returns the site part of a member name.
func SiteOfMember(name string) string {
	site, _, _ := strings.Cut(name, "/")
	return site
}
