package vllm

import (
	"net/http"
)

// RenderResponse is one prompt's answer of the render endpoints: the token ids the engine would
// run for it (vLLM's `vllm launch render` server; llm-d-inference-sim v0.10.2 pkg/api/render.go
// RenderResponse; read by llm-d-router v0.10.0's token-producer, dataproducer/tokenizer/
// vllm_http.go). Multimodal features are not produced: the fake renders every non-text part as
// text.
type RenderResponse struct {
	TokenIDs []uint32 `json:"token_ids"`
}

// handleRender serves POST /v1/completions/render (a JSON array, one RenderResponse per prompt
// of the request: a string, a list of strings, token ids or lists of token ids, given ids copied
// through) and POST /v1/chat/completions/render (one RenderResponse for the conversation as the
// engine renders it). The body is decoded as the API itself decodes it, so a render returns
// exactly the tokens a request would put in the KV cache, and it is refused the same way (400
// naming the field, 404 for an unknown model). Nothing runs on the engine.
func (s *Server) handleRender(w http.ResponseWriter, r *http.Request, api apiKind) {
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		api.writeError(w, apiErr)
		return
	}
	req, apiErr := api.decode(body)
	if apiErr != nil {
		api.writeError(w, apiErr)
		return
	}
	if _, ok := s.resolveModel(req.model); !ok {
		api.writeError(w, NewAPIError(http.StatusNotFound, "model", "The model `%s` does not exist.", req.model))
		return
	}
	out := make([]RenderResponse, len(req.prompts))
	for i, p := range req.prompts {
		toks := p.engineTokens()
		ids := make([]uint32, len(toks))
		for j, t := range toks {
			ids[j] = t.ID
		}
		out[i] = RenderResponse{TokenIDs: ids}
	}
	if api == apiChat {
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}
