package signals

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ContentType is the exposition's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Render writes rows as exposition, each sample stamped with its
// observation time in milliseconds, grouped by metric under one TYPE line.
// collect, when not empty, keeps only those metric names. It returns the
// age of the oldest sample written (the response's Age) and how many were.
func Render(w io.Writer, rows []Row, collect []string, now time.Time) (oldest time.Duration, n int, err error) {
	var all []Sample
	for _, r := range rows {
		for _, smp := range r.Samples {
			if len(collect) == 0 || slices.Contains(collect, smp.Metric) {
				all = append(all, smp)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b Sample) int { return cmp.Compare(a.Metric, b.Metric) })
	var b bytes.Buffer
	last := ""
	for _, smp := range all {
		if !ValidSample(smp) {
			continue // never written: a name is written unescaped
		}
		if smp.Metric != last {
			fmt.Fprintf(&b, "# TYPE %s gauge\n", smp.Metric)
			last = smp.Metric
		}
		b.WriteString(smp.Metric)
		b.WriteByte('{')
		for i, l := range smp.Labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l.Name)
			b.WriteString(`="`)
			escape(&b, l.Value)
			b.WriteByte('"')
		}
		b.WriteString("} ")
		b.WriteString(strconv.FormatFloat(smp.Value, 'g', -1, 64))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(smp.At.UnixMilli(), 10))
		b.WriteByte('\n')
		if age := now.Sub(smp.At); age > oldest {
			oldest = age
		}
	}
	_, err = w.Write(b.Bytes())
	return oldest, len(all), err
}

func escape(b *bytes.Buffer, v string) {
	for _, r := range v {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
}

// Parsed is one sample of an exposition.
type Parsed struct {
	Sample
	// StampMillis is the sample's own timestamp, 0 when it has none.
	StampMillis int64
}

// ErrNotExposition is a body that is not Prometheus text exposition.
var ErrNotExposition = errors.New("not Prometheus text exposition")

// Parse reads an exposition: the gauges and untyped samples with a finite
// value (a counter or histogram relayed by a reader would report the
// writer's restarts, not load). keep, when set, names the metrics wanted.
func Parse(body []byte, keep func(metric string) bool) ([]Parsed, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotExposition, firstLine(err.Error()))
	}
	var out []Parsed
	for name, fam := range families {
		if keep != nil && !keep(name) {
			continue
		}
		for _, m := range fam.GetMetric() {
			var v float64
			switch fam.GetType() {
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			p := Parsed{Sample: Sample{Metric: name, Value: v}, StampMillis: m.GetTimestampMs()}
			for _, l := range m.GetLabel() {
				p.Labels = append(p.Labels, Label{l.GetName(), l.GetValue()})
			}
			slices.SortFunc(p.Labels, func(a, b Label) int { return cmp.Compare(a.Name, b.Name) })
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Parsed) int { return cmp.Compare(a.Metric, b.Metric) })
	return out, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
