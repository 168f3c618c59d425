//go:build eppkit_mutants

package main

import (
	"strings"
	"testing"

	"github.com/eppkit/eppkit/internal/mutant"
)

func TestMutantVerdict(t *testing.T) {
	m, _ := mutant.Lookup(mutant.KVIgnored)
	registered := map[string]bool{"KVCacheAwareness": true}
	base := matrixRun{passed: []string{"KVCacheAwareness", "EPPHealth"}}
	for _, tc := range []struct {
		name    string
		run     matrixRun
		base    matrixRun
		reg     map[string]bool
		want    string
		wantEsc bool
	}{
		{"caught", matrixRun{mutant: m, failed: []string{"KVCacheAwareness"}}, base, registered, "**yes**", false},
		{"escaped", matrixRun{mutant: m, failed: []string{"EPPHealth"}}, base, registered, "**NO**", true},
		{"pending", matrixRun{mutant: m}, base, map[string]bool{}, "pending", false},
		{"baseline did not pass the target", matrixRun{mutant: m, failed: []string{"KVCacheAwareness"}}, matrixRun{passed: []string{"EPPHealth"}}, registered, "not judged", false},
		{"run broken", matrixRun{mutant: m, problem: "exit 2"}, base, registered, "not judged", false},
	} {
		got, esc := verdict(tc.run, tc.base, tc.reg)
		if !strings.HasPrefix(got, tc.want) || esc != tc.wantEsc {
			t.Errorf("%s: verdict %q escaped %v, want %q… escaped %v", tc.name, got, esc, tc.want, tc.wantEsc)
		}
	}
	w, _ := mutant.Lookup(mutant.DAGMapOrder)
	wbase := matrixRun{passed: []string{"X when y should sort them identically, by name then type, on every start"}}
	if got, _ := verdict(matrixRun{mutant: w, failed: wbase.passed}, wbase, registered); got != "**yes**" {
		t.Errorf("white-box substring match: %q", got)
	}
}
