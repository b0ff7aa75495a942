package fold

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
)

// Readers is what the reporting pods of one gateway read of its overlay
// ConfigMap and ask for: the agent publishes the compressed form only to a
// gateway whose pods all read it, and nothing larger than the smallest
// bound a pod reports.
type Readers struct {
	// Pods reported within the forget age.
	Pods int
	// PlainOnly pods read only the plain form: their sidecars predate the
	// compressed one (they do not say what they read).
	PlainOnly int
	// AskPlain and AskZstd pods are configured to ask for that form.
	AskPlain, AskZstd int
	// MaxBytes is the smallest envelope bound the pods report; 0 when none
	// reports one.
	MaxBytes int
}

// verdict is what of Readers can change the form or the bound chosen:
// another pod like the others changes nothing.
type verdict struct {
	anyPods, plainOnly, askPlain, askZstd bool
	maxBytes                              int
}

func (r Readers) verdict() verdict {
	return verdict{r.Pods > 0, r.PlainOnly > 0, r.AskPlain > 0, r.AskZstd > 0, r.MaxBytes}
}

// Readers is what the gateway's pods read and ask for.
func (a *Aggregator) Readers(namespace, name string) Readers {
	now := a.opts.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gateways[types.NamespacedName{Namespace: namespace, Name: name}]
	if g == nil {
		return Readers{}
	}
	return a.readersLocked(g, now)
}

func (a *Aggregator) readersLocked(g *gateway, now time.Time) Readers {
	var r Readers
	for _, p := range g.pods {
		if now.Sub(p.receivedAt) > a.opts.ForgetAfter {
			continue
		}
		r.Pods++
		rep := p.report
		if !rep.ReadsForm(deliveryreport.FormZstd) {
			r.PlainOnly++
		}
		switch rep.Encoding {
		case deliveryreport.FormPlain:
			r.AskPlain++
		case deliveryreport.FormZstd:
			r.AskZstd++
		}
		if rep.MaxBytes > 0 && (r.MaxBytes == 0 || rep.MaxBytes < r.MaxBytes) {
			r.MaxBytes = rep.MaxBytes
		}
	}
	return r
}

// OnReadersChange registers who is told that what a network's gateway
// pods read or ask for changed (a first pod reported, a pod that reads
// only the plain form came or went, a bound moved): the overlay is then
// published again in the form that fits.
func (a *Aggregator) OnReadersChange(f func(network string)) {
	a.mu.Lock()
	a.onReaders = f
	a.mu.Unlock()
}

// readersChangedLocked recomputes a gateway's readers and reports whether
// their verdict moved since it was last told.
func (a *Aggregator) readersChangedLocked(g *gateway, now time.Time) bool {
	v := a.readersLocked(g, now).verdict()
	if v == g.told {
		return false
	}
	g.told = v
	return true
}

// sameReading reports whether two reports of a pod say the same of what it
// reads and asks for.
func sameReading(a, b deliveryreport.Report) bool {
	return a.ReadsForm(deliveryreport.FormZstd) == b.ReadsForm(deliveryreport.FormZstd) &&
		a.Encoding == b.Encoding && a.MaxBytes == b.MaxBytes
}
