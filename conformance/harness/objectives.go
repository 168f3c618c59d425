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

// The llm-d.ai API group test's objects (SPEC §10; docs/request-surface.md §7): each in the group
// GroupLLMD or GroupLegacy only, or split between them. The apiserver endpoint source creates them
// (GroupObjectives, GroupModelRewrites); a static pool has no API groups.
const (
	// GroupLLMD and GroupLegacy are the API groups of InferenceObjective and InferenceModelRewrite
	// in llm-d-router v0.10.0 and in GIE v1.5.0.
	GroupLLMD   = "llm-d.ai"
	GroupLegacy = "inference.networking.x-k8s.io"
	// LLMDSheddableObjective exists only in llm-d.ai, priority -1.
	LLMDSheddableObjective = "eppkit-conformance-llmd-sheddable"
	// LegacySheddableObjective exists only in the legacy group, priority -1.
	LegacySheddableObjective = "eppkit-conformance-legacy-sheddable"
	// SplitObjective has priority 0 in llm-d.ai and -1 in the legacy group.
	SplitObjective = "eppkit-conformance-split"
	// SplitRewriteAlias is rewritten to AdapterName(1, 0) by its llm-d.ai InferenceModelRewrite
	// and to AdapterName(2, 0) by its legacy one (both named SplitRewriteName).
	SplitRewriteAlias = "eppkit-conformance-split-alias"
	SplitRewriteName  = "eppkit-conformance-split-rewrite"
	// LegacyRewriteAlias is rewritten to AdapterName(3, 0) by a legacy InferenceModelRewrite
	// (LegacyRewriteName) only.
	LegacyRewriteAlias = "eppkit-conformance-legacy-alias"
	LegacyRewriteName  = "eppkit-conformance-legacy-rewrite"
)

// GroupObjective is an InferenceObjective of one API group.
type GroupObjective struct {
	Group, Name string
	Priority    int
}

// GroupObjectives returns the llm-d.ai group test's InferenceObjectives.
func GroupObjectives() []GroupObjective {
	return []GroupObjective{
		{GroupLLMD, LLMDSheddableObjective, -1},
		{GroupLegacy, LegacySheddableObjective, -1},
		{GroupLLMD, SplitObjective, 0},
		{GroupLegacy, SplitObjective, -1},
	}
}

// GroupModelRewrite is an InferenceModelRewrite of one API group: Alias → Target.
type GroupModelRewrite struct {
	Group, Name, Alias, Target string
}

// GroupModelRewrites returns the llm-d.ai group test's InferenceModelRewrites.
func GroupModelRewrites() []GroupModelRewrite {
	return []GroupModelRewrite{
		{GroupLLMD, SplitRewriteName, SplitRewriteAlias, AdapterName(1, 0)},
		{GroupLegacy, SplitRewriteName, SplitRewriteAlias, AdapterName(2, 0)},
		{GroupLegacy, LegacyRewriteName, LegacyRewriteAlias, AdapterName(3, 0)},
	}
}
