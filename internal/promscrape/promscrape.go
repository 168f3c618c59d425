// Package promscrape reads a Prometheus /metrics page the way every eppkit driver and suite
// does: GET it, parse the text exposition with prometheus/common/expfmt, and add up the series
// of a family. (The reference EPP's own scraper is reference/datalayer: it is part of the EPP.)
package promscrape

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is a parsed exposition, by family name.
type Families map[string]*dto.MetricFamily

// maxPage bounds the page read (a fake vLLM's page is a few kB; an EPP's with 1,000 endpoints a
// few hundred).
const maxPage = 16 << 20

// Get fetches url (a full /metrics URL) with client (nil = http.DefaultClient) and parses it.
// A status other than 200 or a page that does not parse is an error naming url.
func Get(ctx context.Context, client *http.Client, url string) (Families, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	fams, err := Parse(io.LimitReader(resp.Body, maxPage))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return fams, nil
}

// Parse parses a Prometheus text exposition (UTF-8 metric names allowed).
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse the metrics page: %w", err)
	}
	return fams, nil
}

// Gather collects g (a prometheus.Registry, for one) into Families, for a test that reads a
// registry in process instead of over HTTP.
func Gather(g prometheus.Gatherer) (Families, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(Families, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// ByLabel adds the values of family name's series by the value of their label (a series without
// it adds under ""): eppkit_epp_requests_total by "code", for one. Empty when the family is absent.
func (f Families) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f[name].GetMetric() {
		v := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				v = l.GetValue()
			}
		}
		out[v] += Value(m)
	}
	return out
}

// Has reports whether the page has family name.
func (f Families) Has(name string) bool { _, ok := f[name]; return ok }

// Sum adds the values of every series of family name (gauges, counters and untyped samples; a
// histogram or summary adds its sample count): 0 when the family is absent.
func (f Families) Sum(name string) float64 {
	var v float64
	for _, m := range f[name].GetMetric() {
		v += Value(m)
	}
	return v
}

// First is the value of the first series of family name, and false when it has none.
func (f Families) First(name string) (float64, bool) {
	ms := f[name].GetMetric()
	if len(ms) == 0 {
		return 0, false
	}
	return Value(ms[0]), true
}

// Histogram adds the sample counts and sums of every series of histogram family name (zeros when
// the family is absent).
func (f Families) Histogram(name string) (count, sum float64) {
	for _, m := range f[name].GetMetric() {
		if h := m.GetHistogram(); h != nil {
			count += float64(h.GetSampleCount())
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// Value is a series' value: a gauge's, counter's or untyped sample's, a histogram's or summary's
// sample count.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}
