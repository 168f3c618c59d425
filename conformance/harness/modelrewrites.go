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
