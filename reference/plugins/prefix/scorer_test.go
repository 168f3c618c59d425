package prefix

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func TestScorer(t *testing.T) {
	tests := []struct {
		name string
		attr any // nil: no attribute
		set  bool
		want float64
	}{
		{name: "missing", want: 0},
		{name: "half", attr: &PrefixCacheMatchInfo{MatchBlocks: 5, TotalBlocks: 10}, set: true, want: 0.5},
		{name: "full", attr: &PrefixCacheMatchInfo{MatchBlocks: 10, TotalBlocks: 10}, set: true, want: 1},
		{name: "zero total", attr: &PrefixCacheMatchInfo{MatchBlocks: 0, TotalBlocks: 0}, set: true, want: 0},
		{name: "match beyond total clamps", attr: &PrefixCacheMatchInfo{MatchBlocks: 12, TotalBlocks: 10}, set: true, want: 1},
		{name: "value instead of pointer", attr: PrefixCacheMatchInfo{MatchBlocks: 5, TotalBlocks: 10}, set: true, want: 0},
		{name: "typed nil pointer", attr: (*PrefixCacheMatchInfo)(nil), set: true, want: 0},
		{name: "other type", attr: 0.7, set: true, want: 0},
	}
	s, err := NewScorer("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := framework.NewEndpoint(meta("a", "10.0.0.1"), nil)
			if tc.set {
				ep.Put(PrefixCacheMatchInfoKey, tc.attr)
			}
			got := s.Score(context.Background(), framework.NewCycleState(), nil, []*framework.Endpoint{ep})
			if v := got[ep.Key()]; v != tc.want || math.IsNaN(v) {
				t.Fatalf("score = %v, want %v", v, tc.want)
			}
			out := []float64{-1}
			s.ScoreIndexed(context.Background(), framework.NewCycleState(), nil, []*framework.Endpoint{ep}, out)
			if out[0] != tc.want {
				t.Fatalf("ScoreIndexed = %v, want %v", out[0], tc.want)
			}
		})
	}
}

func TestScorerProducerParameters(t *testing.T) {
	s, err := NewScorer("old", json.RawMessage(` {"blockSizeTokens": 32} `))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"blockSizeTokens": 32}`, string(s.ProducerParameters(PrefixCacheMatchInfoKey))); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if s.ProducerParameters("other") != nil {
		t.Fatalf("parameters handed out for another key")
	}
	plain, _ := NewScorer("", json.RawMessage(`null`))
	if plain.ProducerParameters(PrefixCacheMatchInfoKey) != nil || plain.TypedName().Name != ScorerType {
		t.Fatalf("plain scorer: %+v", plain)
	}
	if diff := cmp.Diff(map[string]any{PrefixCacheMatchInfoKey: (*PrefixCacheMatchInfo)(nil)}, plain.Consumes()); diff != "" {
		t.Fatalf("Consumes (-want +got):\n%s", diff)
	}
}

func TestRegister(t *testing.T) {
	reg := framework.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	if typ, ok := reg.DefaultProducer(PrefixCacheMatchInfoKey); !ok || typ != ProducerType {
		t.Fatalf("default producer = %q, %v", typ, ok)
	}
	if err := Register(reg); err == nil {
		t.Fatalf("double registration accepted")
	}
}
