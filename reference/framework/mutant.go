package framework

// mutantMapOrder reorders the nodes of each layer of order (sorted by layer) by Go map iteration,
// upstream's order before eppkit sorted it, for the dag-map-order mutant (selfcheck/mutant; dead
// code in builds without the eppkit_mutants tag).
func mutantMapOrder(order []*dataNode) {
	for start := 0; start < len(order); {
		end := start
		set := map[*dataNode]struct{}{}
		for end < len(order) && order[end].layer == order[start].layer {
			set[order[end]] = struct{}{}
			end++
		}
		i := start
		for n := range set {
			order[i] = n
			i++
		}
		start = end
	}
}
