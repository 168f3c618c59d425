package prefixworkload

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/reference/plugins/filters"
)

// draw runs n steps of churn + request and returns the requests as JSON and the pool sizes.
func draw(seed int64, cfg Config, n int) ([]string, []int) {
	w := New(rand.New(rand.NewPCG(uint64(seed), 1)), cfg)
	w.InitialPool()
	var reqs []string
	var sizes []int
	for i := range n {
		w.Churn()
		req, _ := w.Request(i)
		b, err := json.Marshal(req)
		if err != nil {
			panic(err)
		}
		reqs = append(reqs, string(b))
		sizes = append(sizes, len(w.Snapshot()))
	}
	return reqs, sizes
}

func TestWorkloadDeterministic(t *testing.T) {
	seed := testseed.Seed()
	cfg := Config{MaxBlocks: 8, PoolBlockSize: 4, SelectionHeader: true}
	a, sa := draw(seed, cfg, 300)
	b, sb := draw(seed, cfg, 300)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(sa, sb) {
		t.Fatalf("seed %d: two workloads from the same seed differ", seed)
	}
	c, _ := draw(seed+1, cfg, 300)
	if reflect.DeepEqual(a, c) {
		t.Fatalf("seeds %d and %d drew the same 300 requests", seed, seed+1)
	}
}

func TestWorkloadShape(t *testing.T) {
	seed := testseed.Seed()
	for _, utf := range []bool{false, true} {
		w := New(rand.New(rand.NewPCG(uint64(seed), 2)), Config{MaxBlocks: 64, SelectionHeader: true, ValidUTF8: utf})
		w.InitialPool()
		chat, invalid, header := 0, 0, 0
		const n = 2000
		for i := range n {
			w.Churn()
			if k := len(w.InPool()); k < MinEndpoints || k > MaxEndpoints {
				t.Fatalf("seed %d request %d: pool of %d endpoints", seed, i, k)
			}
			req, _ := w.Request(i)
			if req.Headers[filters.TestEndpointSelectionHeader] != "" {
				header++
			}
			var text string
			if req.Body.ChatCompletions != nil {
				chat++
				for _, m := range req.Body.ChatCompletions.Messages {
					if s, ok := m.Content.(string); ok {
						text += s
					}
				}
			} else {
				text = req.Body.Completions.Prompt
			}
			if !utf8.ValidString(text) {
				invalid++
			}
			if strings.ContainsAny(text, "\x00") {
				t.Fatalf("seed %d: NUL outside the alphabet", seed)
			}
		}
		if header != n {
			t.Fatalf("seed %d: %d of %d requests carry the selection header", seed, header, n)
		}
		// 40% chat: with n = 2000 the count is Binomial(2000, 0.4), sd ≈ 22; [650, 950] is > 6 sd
		// from the mean on both sides (false-failure probability < 1e-8).
		if chat < 650 || chat > 950 {
			t.Fatalf("seed %d: %d chat requests of %d, want about 800", seed, chat, n)
		}
		if utf && invalid > 0 {
			t.Fatalf("seed %d: ValidUTF8 workload produced %d invalid UTF-8 inputs", seed, invalid)
		}
		// Byte draws: each of ~1,000 bytes per prompt is half of an é with probability 2/53, so a
		// prompt with no split é is rare; 2000 prompts all valid has probability far below 1e-9.
		if !utf && invalid == 0 {
			t.Fatalf("seed %d: byte-drawn workload never produced invalid UTF-8 in %d requests", seed, n)
		}
	}
}
