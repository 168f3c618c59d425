package conformance

import (
	"sort"
	"strconv"
	"strings"
)

// SheddableObjective is the InferenceObjective the RequestShedding tests send sheddable requests
// with (header x-gateway-inference-objective); its priority is SheddablePriority. The apiserver
// endpoint source creates it; an EPP with a static pool must be told it (the reference target
// passes --objectives, see ReferenceCommand).
const (
	SheddableObjective = "eppkit-conformance-sheddable"
	SheddablePriority  = -1
)

// Objectives returns the InferenceObjectives every conformance run provides: name → priority.
func Objectives() map[string]int {
	return map[string]int{SheddableObjective: SheddablePriority}
}

// ObjectivesFlag renders Objectives as the reference's --objectives value ("name=priority,...",
// sorted by name).
func ObjectivesFlag() string {
	objs := Objectives()
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.Itoa(objs[n])
	}
	return strings.Join(parts, ",")
}
