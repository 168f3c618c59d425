package director

import "maps"

// mutantWithoutSLO returns a copy of headers without the SLO headers x-slo-ttft-ms and
// x-slo-tpot-ms (SPEC §4.1), for the slo-ignored mutant (internal/mutant; dead code in builds
// without the eppkit_mutants tag).
func mutantWithoutSLO(headers map[string]string) map[string]string {
	out := maps.Clone(headers)
	delete(out, "x-slo-ttft-ms")
	delete(out, "x-slo-tpot-ms")
	return out
}
