package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// The model rewrite every conformance run provides (SPEC §9.4, GIE InferenceModelRewrite
// v1alpha2): requests for ModelRewriteAlias go to the targets of ModelRewriteTargets, by weight.
// The apiserver endpoint source creates it as the InferenceModelRewrite ModelRewriteName of the
// pool; an EPP with a static pool must be told it (the reference target passes --model-rewrites
// {{.ModelRewritesFile}}, the file ModelRewritesYAML writes).
const (
	ModelRewriteName  = "eppkit-conformance-rewrite"
	ModelRewriteAlias = "eppkit-conformance-alias"
)

// ModelRewritesFile is the format of the {{.ModelRewritesFile}} a command target receives: YAML,
// the spec of GIE's InferenceModelRewrite (v1alpha2) without its poolRef, i.e. its rules. Each
// rule maps requests whose body's model matches one of Matches to one of Targets, chosen per
// request by weight (share = weight / Σ weights); the EPP rewrites the body's model to the target
// (SPEC §9.4). docs/contracts.md shows the file every run writes; ModelRewritesYAML renders it.
type ModelRewritesFile struct {
	// Rules are tried in order; the first whose match holds applies.
	Rules []ModelRewriteRule `json:"rules"`
}

// ModelRewriteRule is one rule of a ModelRewritesFile.
type ModelRewriteRule struct {
	// Matches: the rule applies when any match holds.
	Matches []ModelRewriteMatch `json:"matches"`
	// Targets are the weighted target models.
	Targets []RewriteTarget `json:"targets"`
}

// ModelRewriteMatch matches the request body's model.
type ModelRewriteMatch struct {
	// Model is the model match: Type "Exact" (the only type the conformance file uses) and Value.
	Model struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"model"`
}

// RewriteTarget is one weighted target model of the conformance rewrite.
type RewriteTarget struct {
	// Model is the target model name: a LoRA adapter the fleet serves.
	Model string `json:"modelRewrite"`
	// Weight is the target's weight (share = Weight / Σ weights).
	Weight int32 `json:"weight"`
}

// AdapterName is the name of LoRA adapter index of fleet member member (0-based): unique across
// the fleet, as the harness loads them.
func AdapterName(member, index int) string {
	return "conformance-lora-" + strconv.Itoa(member) + "-" + strconv.Itoa(index)
}

// ModelRewriteTargets returns the conformance rewrite's targets: member 0's first adapter with
// weight 3 and member 1's with weight 1 (75% / 25%). They exist when the fleet has at least two
// members with at least one adapter each (the harness defaults).
func ModelRewriteTargets() []RewriteTarget {
	return []RewriteTarget{{Model: AdapterName(0, 0), Weight: 3}, {Model: AdapterName(1, 0), Weight: 1}}
}

// ModelRewritesYAML renders the conformance rewrite as the reference's --model-rewrites file:
// the InferenceModelRewrite spec's rules in YAML.
func ModelRewritesYAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %s by weight (eppkit conformance harness)\nrules:\n- matches:\n  - model: {type: Exact, value: %s}\n  targets:\n",
		ModelRewriteName, ModelRewriteAlias, ModelRewriteAlias)
	for _, t := range ModelRewriteTargets() {
		fmt.Fprintf(&b, "  - {modelRewrite: %s, weight: %d}\n", t.Model, t.Weight)
	}
	return []byte(b.String())
}
