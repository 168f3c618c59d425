package harness

// SheddableObjective is the InferenceObjective the RequestShedding tests send sheddable requests
// with (header x-gateway-inference-objective); its priority is SheddablePriority. The apiserver
// endpoint source creates it; an EPP with a static pool must be told it (the reference target
// passes --objectives, see ReferenceCommand).
const (
	SheddableObjective = "eppkit-conformance-sheddable"
	SheddablePriority  = -1
	// CriticalObjective is the InferenceObjective of the FlowControl tests' high-priority
	// requests (priority CriticalPriority); provided like SheddableObjective.
	CriticalObjective = "eppkit-conformance-critical"
	CriticalPriority  = 10
)

// Objectives returns the InferenceObjectives every conformance run provides: name → priority.
func Objectives() map[string]int {
	return map[string]int{SheddableObjective: SheddablePriority, CriticalObjective: CriticalPriority}
}
