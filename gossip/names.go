package gossip

import (
	"github.com/gridsync/gridsync/gossip/internal/streamgate"
	"github.com/gridsync/gridsync/gossip/record"
)

// The names of what travels and of the stream gate that the runtime's users
// (the agent, the control plane's and the suites' tests) spell as the
// runtime's: the records and their codec live in gossip/record, the gate in
// gossip/internal/streamgate.
type (
	// Record is one site's state of one kind in one network, as gossiped.
	Record = record.Record
	// Kind is what a record describes.
	Kind = record.Kind
	// GateLimits bound what the stream gate lets a caller spend before it
	// is authenticated.
	GateLimits = streamgate.Limits
)

// The kinds of record.
const (
	KindSite      = record.KindSite
	KindProviders = record.KindProviders
	KindSignals   = record.KindSignals
)

// DefaultGridIDSettle is how long a new grid ID may still give way to
// another new one (Config.GridIDSettle when zero).
const DefaultGridIDSettle = record.DefaultGridIDSettle

// DefaultGateLimits are the stream gate's limits sized from a real grid
// (Config.Gate when zero).
func DefaultGateLimits() GateLimits { return streamgate.DefaultLimits() }

// DirectMessage is the state layer's message that carries records
// straight to one member, as a key holder can send it (tests and the
// attack suite).
func DirectMessage(records []Record) ([]byte, error) { return record.EncodeDirectRecords(records) }
