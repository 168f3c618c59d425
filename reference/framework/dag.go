package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// The PrepareData dependency graph (SPEC §1.1). Upstream builds it in
// gateway-api-inference-extension, pkg/epp/requestcontrol/dag.go, over PrepareData plugins only,
// compares the declared zero values with `!=`, stops at the first shared key and sorts with map
// order. eppkit's graph differs on each point, as SPEC §1.1 marks:
//
//   - nodes are every plugin that produces or consumes data (DataProducer / DataConsumer);
//   - an edge consumer → producer exists for every key the consumer consumes and the producer
//     produces, and every such key is type-checked with reflect.TypeOf;
//   - the order is layered Kahn's algorithm: layer 0 holds the plugins that consume nothing
//     produced by another node, layer k+1 those whose producers are all in layers ≤ k (so a node's
//     layer is the longest path from a source); inside a layer plugins are sorted by name, then
//     type, so the order is the same on every start whatever the config or registration order.

// Phase is the extension point in which a plugin first runs. A data producer must not run in a
// later phase than its consumers (the layer rule of SPEC §1.1; see checkLayers).
type Phase int

// Phases, in request order. PhaseNone is a data producer or consumer that implements no
// extension point; the phase rule does not apply to it.
const (
	PhasePrepareData Phase = iota
	PhaseAdmission
	PhaseScheduling
	PhasePreRequest
	PhaseResponse
	PhaseNone
)

// String returns the phase's name.
func (p Phase) String() string {
	switch p {
	case PhasePrepareData:
		return "PrepareData"
	case PhaseAdmission:
		return "Admission"
	case PhaseScheduling:
		return "Scheduling"
	case PhasePreRequest:
		return "PreRequest"
	case PhaseResponse:
		return "Response"
	}
	return "none"
}

// PhaseOf returns the first extension point p implements, in request order.
func PhaseOf(p Plugin) Phase {
	switch p.(type) {
	case PrepareDataPlugin:
		return PhasePrepareData
	case Admitter:
		return PhaseAdmission
	case Filter, Scorer, Picker, ProfileHandler:
		return PhaseScheduling
	case PreRequest:
		return PhasePreRequest
	case ResponseHeaderPlugin, ResponseBodyPlugin, ResponseCompletePlugin:
		return PhaseResponse
	}
	return PhaseNone
}

// FixedLayerPlugin is implemented by a PrepareData plugin that must run in a fixed layer of the
// DAG instead of the layer the graph assigns (for example a plugin that must start with the
// first layer because it reads a deadline-sensitive source). Layers are numbered from 0. A fixed
// layer may be later than the assigned one; one that puts the plugin in the same or an earlier
// layer than a producer it consumes from makes NewRuntime fail (SPEC §1.1: a producer runs in an
// earlier layer than its consumers; same-layer plugins run concurrently on separate staging and
// cannot see each other's writes).
type FixedLayerPlugin interface {
	PrepareDataPlugin
	// PrepareDataLayer returns the layer (≥ 0) the plugin runs in.
	PrepareDataLayer() int
}

// DAGNode describes one node of the data graph, as Runtime.DAG reports it.
type DAGNode struct {
	// Plugin is the node's plugin.
	Plugin TypedName
	// Layer is the node's layer: the longest path from a source, or the fixed layer of a
	// FixedLayerPlugin.
	Layer int
	// Phase is the extension point the plugin first runs in.
	Phase Phase
	// DependsOn are the producers this node consumes from, sorted by name then type.
	DependsOn []TypedName
	// AutoCreated is true for a default producer the runtime created.
	AutoCreated bool
}

type dataNode struct {
	plugin   Plugin
	tn       TypedName
	phase    Phase
	produces map[string]any
	consumes map[string]any
	// deps are the producers this node consumes from; keys[dep] the shared keys, sorted.
	deps  []*dataNode
	keys  map[*dataNode][]string
	layer int
	auto  bool
}

// dataGraph is the built, checked and sorted graph.
type dataGraph struct {
	// order is every node sorted by (layer, name, type).
	order []*dataNode
}

func lessTN(a, b TypedName) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Type < b.Type
}

func sortNodes(ns []*dataNode) {
	sort.Slice(ns, func(i, j int) bool { return lessTN(ns[i].tn, ns[j].tn) })
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// buildDataGraph builds the graph over r's plugins, creating default producers on r as needed.
func buildDataGraph(r *Runtime) (*dataGraph, error) {
	nodes := map[string]*dataNode{}
	var all []*dataNode
	addNode := func(p Plugin, auto bool) {
		n := &dataNode{plugin: p, tn: p.TypedName(), phase: PhaseOf(p), keys: map[*dataNode][]string{}, auto: auto}
		isNode := false
		if dp, ok := p.(DataProducer); ok {
			n.produces = dp.Produces()
			isNode = true
		}
		if dc, ok := p.(DataConsumer); ok {
			n.consumes = dc.Consumes()
			isNode = true
		}
		if isNode {
			nodes[n.tn.Name] = n
			all = append(all, n)
		}
	}
	for _, p := range r.Plugins() {
		addNode(p, slices.Contains(r.autoCreated, p.TypedName()))
	}

	producersOf := func(key string) []*dataNode {
		var out []*dataNode
		for _, n := range all {
			if _, ok := n.produces[key]; ok {
				out = append(out, n)
			}
		}
		sortNodes(out)
		return out
	}

	// Default producers for consumed keys nobody produces; a created producer may consume keys
	// of its own, so repeat until every key has a producer. Each round adds a plugin of a type
	// not yet present, so the registry's size bounds the loop.
	for {
		sortNodes(all)
		key, consumer := "", (*dataNode)(nil)
		for _, n := range all {
			for _, k := range sortedKeys(n.consumes) {
				if len(producersOf(k)) == 0 {
					key, consumer = k, n
					break
				}
			}
			if consumer != nil {
				break
			}
		}
		if consumer == nil {
			break
		}
		pluginType, ok := r.reg.DefaultProducer(key)
		if !ok {
			return nil, fmt.Errorf("prepareData DAG: plugin %s consumes data key %q, which no plugin produces, "+
				"and no default producer is registered for it", consumer.tn, key)
		}
		params, carriers, err := carriedParameters(all, key)
		if err != nil {
			return nil, err
		}
		p, err := r.autoCreate(pluginType, params)
		if err != nil {
			return nil, fmt.Errorf("prepareData DAG: default producer of data key %q (consumed by %s): %w", key, consumer.tn, err)
		}
		dp, ok := p.(DataProducer)
		if !ok {
			return nil, fmt.Errorf("prepareData DAG: default producer %s of data key %q is not a data producer", p.TypedName(), key)
		}
		if _, ok := dp.Produces()[key]; !ok {
			return nil, fmt.Errorf("prepareData DAG: default producer %s does not produce data key %q", p.TypedName(), key)
		}
		r.logger.Info("created the default producer of a consumed data key", "key", key,
			"consumer", consumer.tn.String(), "producer", p.TypedName().String())
		if len(carriers) > 0 {
			r.logger.Warn("deprecated: producer parameters given to a consumer were moved to the default producer; "+
				"configure the producer instead", "key", key, "from", typedNamesString(carriers),
				"producer", p.TypedName().String(), "parameters", string(params))
		}
		addNode(p, true)
	}
	sortNodes(all)

	if err := checkCarriersAgainstConfigured(r, all); err != nil {
		return nil, err
	}

	// Edges and type checks: every consumed key against every producer of it.
	for _, c := range all {
		for _, k := range sortedKeys(c.consumes) {
			for _, p := range producersOf(k) {
				tp, tc := reflect.TypeOf(p.produces[k]), reflect.TypeOf(c.consumes[k])
				if tp == nil {
					return nil, fmt.Errorf("prepareData DAG: plugin %s declares data key %q in Produces with a nil value; "+
						"declare a typed zero value", p.tn, k)
				}
				if tc == nil {
					return nil, fmt.Errorf("prepareData DAG: plugin %s declares data key %q in Consumes with a nil value; "+
						"declare a typed zero value", c.tn, k)
				}
				if tp != tc {
					return nil, fmt.Errorf("prepareData DAG: data key %q: producer %s produces %s but consumer %s consumes %s",
						k, p.tn, tp, c.tn, tc)
				}
				if p == c {
					continue // a plugin reading its own output needs no ordering
				}
				if _, seen := c.keys[p]; !seen {
					c.deps = append(c.deps, p)
				}
				c.keys[p] = append(c.keys[p], k)
			}
		}
		sortNodes(c.deps)
	}

	order, err := layeredSort(all)
	if err != nil {
		return nil, err
	}
	if err := checkLayers(order); err != nil {
		return nil, err
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].layer != order[j].layer {
			return order[i].layer < order[j].layer
		}
		return lessTN(order[i].tn, order[j].tn)
	})
	// Mutant hook (one of the two left in reference/; selfcheck/mutant, dead code without the
	// eppkit_mutants tag): dag-map-order. The order of the DAG is internal to NewRuntime; a
	// wrapper plugin or a decorated source cannot reorder it, so the hook sits here.
	if mutant.Enabled && mutant.On(mutant.DAGMapOrder) {
		mutantMapOrder(order)
	}
	return &dataGraph{order: order}, nil
}

// layeredSort runs Kahn's algorithm one layer at a time: each round takes every node whose
// producers are all placed, sorted by name then type. The node's layer is the round it was taken
// in, which is the longest path from a source. A cycle is an error that prints it.
func layeredSort(all []*dataNode) ([]*dataNode, error) {
	pending := map[*dataNode]int{} // unplaced producers per node
	consumersOf := map[*dataNode][]*dataNode{}
	for _, n := range all {
		pending[n] = len(n.deps)
		for _, d := range n.deps {
			consumersOf[d] = append(consumersOf[d], n)
		}
	}
	var ready []*dataNode
	for _, n := range all {
		if pending[n] == 0 {
			ready = append(ready, n)
		}
	}
	var order []*dataNode
	for layer := 0; len(ready) > 0; layer++ {
		sortNodes(ready)
		var next []*dataNode
		for _, n := range ready {
			n.layer = layer
			order = append(order, n)
			for _, c := range consumersOf[n] {
				pending[c]--
				if pending[c] == 0 {
					next = append(next, c)
				}
			}
		}
		ready = next
	}
	if len(order) == len(all) {
		return order, nil
	}
	left := map[*dataNode]bool{}
	for _, n := range all {
		if pending[n] > 0 {
			left[n] = true
		}
	}
	return nil, fmt.Errorf("prepareData DAG: dependency cycle %s (each plugin consumes a data key the next one produces)",
		formatCycle(findCycle(left)))
}

// findCycle returns one cycle among the nodes Kahn's algorithm could not place. Every such node
// has an unplaced producer, so a walk from the smallest node that always follows its smallest
// unplaced producer must revisit a node; the revisited stretch is a cycle. The walk is
// deterministic, and the cycle is rotated to start at its smallest node.
func findCycle(left map[*dataNode]bool) []*dataNode {
	var start *dataNode
	for n := range left {
		if start == nil || lessTN(n.tn, start.tn) {
			start = n
		}
	}
	pos := map[*dataNode]int{}
	var path []*dataNode
	for n := start; ; {
		if i, seen := pos[n]; seen {
			cyc := path[i:]
			first := 0
			for j := range cyc {
				if lessTN(cyc[j].tn, cyc[first].tn) {
					first = j
				}
			}
			return append(slices.Clone(cyc[first:]), cyc[:first]...)
		}
		pos[n] = len(path)
		path = append(path, n)
		var next *dataNode
		for _, d := range n.deps { // sorted
			if left[d] {
				next = d
				break
			}
		}
		if next == nil { // cannot happen (see above); report the path rather than loop
			return path
		}
		n = next
	}
}

// formatCycle prints a cycle as `a/x -> b/y -> a/x`, closing on the first node.
func formatCycle(cyc []*dataNode) string {
	parts := make([]string, 0, len(cyc)+1)
	for _, n := range cyc {
		parts = append(parts, n.tn.String())
	}
	if len(cyc) > 0 {
		parts = append(parts, cyc[0].tn.String())
	}
	return strings.Join(parts, " -> ")
}

// checkLayers applies fixed layers and checks the layer rule of SPEC §1.1 on every edge
// consumer → producer, with the nodes in a topological order:
//
//   - phase: the producer's phase must not be later than the consumer's (data a PreRequest
//     plugin produces can never reach a scorer); the same phase is allowed (a filter may produce
//     data that a scorer of the scheduling phase reads). PhaseNone nodes are exempt;
//   - layer: between two PrepareData plugins the producer's layer must be earlier than the
//     consumer's. The assigned layers always satisfy this; a FixedLayerPlugin pinned to a layer
//     at or before one of its producers violates it.
//
// A fixed layer replaces the assigned one, and the layers of the nodes after it are recomputed
// (1 + the latest producer's layer) so that consumers follow a producer pinned to a later layer.
func checkLayers(topo []*dataNode) error {
	for _, n := range topo {
		fixed, isFixed := n.plugin.(interface{ PrepareDataLayer() int })
		if isFixed && n.phase != PhasePrepareData {
			return fmt.Errorf("prepareData DAG: plugin %s declares PrepareDataLayer but is not a PrepareData plugin", n.tn)
		}
		layer := 0
		for _, d := range n.deps {
			layer = max(layer, d.layer+1)
		}
		n.layer = layer
		if isFixed {
			l := fixed.PrepareDataLayer()
			if l < 0 {
				return fmt.Errorf("prepareData DAG: plugin %s declares PrepareDataLayer %d; layers start at 0", n.tn, l)
			}
			n.layer = l
		}
		for _, d := range n.deps {
			if d.phase != PhaseNone && n.phase != PhaseNone && d.phase > n.phase {
				return fmt.Errorf("prepareData DAG: layer violation: producer %s runs in phase %s, after its consumer %s (phase %s), data keys %q",
					d.tn, d.phase, n.tn, n.phase, d.tnKeys(n))
			}
			if d.phase == PhasePrepareData && n.phase == PhasePrepareData && d.layer >= n.layer {
				return fmt.Errorf("prepareData DAG: layer violation: producer %s runs in layer %d, not earlier than its consumer %s "+
					"(fixed layer %d), data keys %q", d.tn, d.layer, n.tn, n.layer, d.tnKeys(n))
			}
		}
	}
	return nil
}

// tnKeys returns the keys consumer c reads from producer d.
func (d *dataNode) tnKeys(c *dataNode) []string { return c.keys[d] }

// prepareDataLayers groups the PrepareData plugins by layer, in layer order, each layer sorted
// by name then type. Empty layers (only non-PrepareData nodes) are dropped.
func (g *dataGraph) prepareDataLayers() [][]PrepareDataPlugin {
	byLayer := map[int][]PrepareDataPlugin{}
	var layers []int
	for _, n := range g.order {
		p, ok := n.plugin.(PrepareDataPlugin)
		if !ok {
			continue
		}
		if _, seen := byLayer[n.layer]; !seen {
			layers = append(layers, n.layer)
		}
		byLayer[n.layer] = append(byLayer[n.layer], p)
	}
	sort.Ints(layers)
	out := make([][]PrepareDataPlugin, 0, len(layers))
	for _, l := range layers {
		out = append(out, byLayer[l])
	}
	return out
}

// carriedParameters collects what ProducerParametersCarrier consumers of key carry for its
// producer. Carriers that disagree with each other are an error naming both.
func carriedParameters(all []*dataNode, key string) (json.RawMessage, []TypedName, error) {
	var params json.RawMessage
	var from []TypedName
	for _, n := range all { // sorted
		pc, ok := n.plugin.(ProducerParametersCarrier)
		if !ok {
			continue
		}
		if _, consumes := n.consumes[key]; !consumes {
			continue
		}
		p := pc.ProducerParameters(key)
		if isNullJSON(p) {
			continue
		}
		if _, err := jsonObject(p); err != nil {
			return nil, nil, fmt.Errorf("prepareData DAG: plugin %s carries producer parameters for data key %q: %w", n.tn, key, err)
		}
		if params != nil {
			if field, a, b, same := compareParams(params, p, false); !same {
				return nil, nil, fmt.Errorf("prepareData DAG: plugins %s and %s carry different producer parameters for data key %q: "+
					"field %q is %s and %s", from[0], n.tn, key, field, a, b)
			}
		} else {
			params = p
		}
		from = append(from, n.tn)
	}
	return params, from, nil
}

// checkCarriersAgainstConfigured fails when a carrier's producer parameters for a key disagree
// with a configured producer of that key on any field the carrier sets: the configured
// producer's parameters win, so the carrier's would be silently ignored.
func checkCarriersAgainstConfigured(r *Runtime, all []*dataNode) error {
	for _, c := range all {
		pc, ok := c.plugin.(ProducerParametersCarrier)
		if !ok {
			continue
		}
		for _, k := range sortedKeys(c.consumes) {
			carried := pc.ProducerParameters(k)
			if isNullJSON(carried) {
				continue
			}
			for _, p := range all {
				if _, produces := p.produces[k]; !produces || p == c {
					continue
				}
				idx, configured := r.configured[p.tn.Name]
				if !configured {
					continue
				}
				field, a, b, same := compareParams(carried, r.cfg.Plugins[idx].Parameters, true)
				if !same {
					return fmt.Errorf("prepareData DAG: plugin %s carries producer parameters for data key %q that disagree with "+
						"configured producer %s (plugins[%d]) on field %q: %s vs %s; set them on the producer only",
						c.tn, k, p.tn, idx, field, a, b)
				}
			}
		}
	}
	return nil
}

// compareParams compares two JSON objects field by field and returns the first (sorted) field
// whose values differ, with both values. With carrierOnly, only the fields of a are compared (a
// field of a missing from b differs); otherwise every field of either.
func compareParams(a, b json.RawMessage, carrierOnly bool) (field, av, bv string, same bool) {
	ma, _ := jsonObject(a)
	mb, _ := jsonObject(b)
	fields := map[string]bool{}
	for k := range ma {
		fields[k] = true
	}
	if !carrierOnly {
		for k := range mb {
			fields[k] = true
		}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	show := func(m map[string]any, k string) string {
		v, ok := m[k]
		if !ok {
			return "<unset>"
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	for _, k := range names {
		va, oka := ma[k]
		vb, okb := mb[k]
		if oka != okb || !reflect.DeepEqual(va, vb) {
			return k, show(ma, k), show(mb, k), false
		}
	}
	return "", "", "", true
}

// jsonObject decodes a JSON object (null or empty → empty map). Numbers decode as float64, so
// 16 and 16.0 compare equal.
func jsonObject(raw json.RawMessage) (map[string]any, error) {
	out := map[string]any{}
	if isNullJSON(raw) {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("parameters must be a JSON object: %w", err)
	}
	return out, nil
}

// hookOrder returns plugins sorted for the request hooks (PreRequest, ResponseHeader,
// ResponseBody, ResponseComplete): by their layer in the data graph — a producer's is lower than
// each of its consumers' — then by name, then type. A plugin outside the graph (it neither
// produces nor consumes data) counts as layer 0. The order is the same on every start whatever the
// config order (SPEC §1.1, §9.2).
func (g *dataGraph) hookOrder(plugins []Plugin) []Plugin {
	layer := make(map[TypedName]int, len(g.order))
	for _, n := range g.order {
		layer[n.tn] = n.layer
	}
	out := slices.Clone(plugins)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].TypedName(), out[j].TypedName()
		if la, lb := layer[a], layer[b]; la != lb {
			return la < lb
		}
		return lessTN(a, b)
	})
	return out
}

// HookOrder returns the plugins of each request hook in the order they run (SPEC §1.1, §9.2):
// by data-graph layer (producers first), then name, then type. The keys are "PreRequest",
// "ResponseHeader", "ResponseBody" and "ResponseComplete".
func (r *Runtime) HookOrder() map[string][]TypedName {
	out := map[string][]TypedName{}
	for _, p := range r.preRequests {
		out["PreRequest"] = append(out["PreRequest"], p.TypedName())
	}
	for _, p := range r.responseHeaders {
		out["ResponseHeader"] = append(out["ResponseHeader"], p.TypedName())
	}
	for _, p := range r.responseBodies {
		out["ResponseBody"] = append(out["ResponseBody"], p.TypedName())
	}
	for _, p := range r.responseCompletes {
		out["ResponseComplete"] = append(out["ResponseComplete"], p.TypedName())
	}
	return out
}

// DAG returns every node of the data graph in execution order: by layer, then name, then type.
func (r *Runtime) DAG() []DAGNode {
	out := make([]DAGNode, 0, len(r.dag.order))
	for _, n := range r.dag.order {
		dn := DAGNode{Plugin: n.tn, Layer: n.layer, Phase: n.phase, AutoCreated: n.auto}
		for _, d := range n.deps {
			dn.DependsOn = append(dn.DependsOn, d.tn)
		}
		out = append(out, dn)
	}
	return out
}

// PrepareDataOrder returns the PrepareData plugins in the order the executor runs them: layer by
// layer, each layer sorted by name then type (plugins of one layer run concurrently).
func (r *Runtime) PrepareDataOrder() []TypedName {
	var out []TypedName
	for _, layer := range r.prepLayers {
		for _, p := range layer {
			out = append(out, p.TypedName())
		}
	}
	return out
}

// PrepareDataLayers returns the PrepareData plugins grouped by the layer they run in; the plugins
// of one layer run concurrently, each layer after the previous one has finished.
func (r *Runtime) PrepareDataLayers() [][]TypedName {
	out := make([][]TypedName, len(r.prepLayers))
	for i, layer := range r.prepLayers {
		for _, p := range layer {
			out[i] = append(out[i], p.TypedName())
		}
	}
	return out
}
