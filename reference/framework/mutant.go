package framework

// mutantMapOrder reorders ns by Go map iteration (upstream's order before eppkit sorted it), for
// the dag-map-order mutant (internal/mutant; dead code in builds without the eppkit_mutants tag).
func mutantMapOrder(ns []*dataNode) {
	set := make(map[*dataNode]struct{}, len(ns))
	for _, n := range ns {
		set[n] = struct{}{}
	}
	i := 0
	for n := range set {
		ns[i] = n
		i++
	}
}
