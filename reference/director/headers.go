package director

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/eppkit/eppkit/reference/framework"
)

// readControlHeaders fills req.Objective and req.FairnessID from the request control headers,
// current name first, then the GIE v1.5.0 alias (framework.RequestHeader; llm-d-router v0.10.0
// pkg/epp/handlers/request.go HandleRequestHeaders and requestcontrol/director.go HandleRequest).
//
// Malformed values (docs/request-surface.md) [eppkit]: an objective header whose value, trimmed,
// is not empty and not a Kubernetes object name (a DNS-1123 subdomain: what an InferenceObjective
// can be called) is an error wrapping framework.ErrBadRequest that names the header it came in.
// llm-d-router v0.10.0 looks any value up and falls back to the default objective (priority 0).
// An empty objective means none. Every fairness id is valid (upstream takes any string); an
// empty one is framework.DefaultFairnessID, as upstream.
func readControlHeaders(req *framework.LLMRequest) error {
	if v, as, ok := framework.RequestHeader(req.Headers, framework.HeaderObjective); ok {
		v = strings.TrimSpace(v)
		if v != "" {
			if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
				return fmt.Errorf("header %s: %q cannot name an InferenceObjective (want a DNS-1123 subdomain: lower case "+
					"letters, digits, '-' and '.', at most 253 characters): %w", as, v, framework.ErrBadRequest)
			}
		}
		req.Objective = v
	}
	req.FairnessID = framework.DefaultFairnessID
	if v, _, ok := framework.RequestHeader(req.Headers, framework.HeaderFairnessID); ok && strings.TrimSpace(v) != "" {
		req.FairnessID = strings.TrimSpace(v)
	}
	return nil
}
