package vllm

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
)

// DefaultEmbeddingDim is the default embedding vector length (llm-d-inference-sim's
// --default-embedding-dimensions default).
const DefaultEmbeddingDim = 384

// EmbeddingRequest is the subset of the OpenAI /v1/embeddings body the fake reads (vLLM
// entrypoints/openai EmbeddingCompletionRequest). Other fields are accepted and ignored.
type EmbeddingRequest struct {
	Model string `json:"model"`
	// Input is a string, an array of strings, an array of token ids or an array of arrays of
	// token ids.
	Input json.RawMessage `json:"input"`
	// Dimensions, when set, truncates each vector to this length (1 ≤ dimensions ≤
	// --embedding-dim) and renormalises it, as a Matryoshka model does.
	Dimensions *int `json:"dimensions,omitempty"`
	// EncodingFormat is "float" (default) or "base64" (little-endian float32).
	EncodingFormat string `json:"encoding_format,omitempty"`
	CacheSalt      string `json:"cache_salt,omitempty"`
}

// decodeEmbeddings parses and validates an embeddings body; errors are 400 APIErrors naming the
// field. dims is filled by the server from its configuration when the request sets none.
func decodeEmbeddings(body []byte) (*genRequest, *APIError) {
	var req EmbeddingRequest
	if err := decodeObject(body, &req); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, NewAPIError(http.StatusBadRequest, "model", "the field 'model' is required")
	}
	prompts, err := parsePrompts(req.Input, "input")
	if err != nil {
		return nil, err
	}
	g := &genRequest{api: apiEmbeddings, model: req.Model, prompts: prompts, cacheSalt: req.CacheSalt}
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		g.base64 = true
	default:
		return nil, NewAPIError(http.StatusBadRequest, "encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", req.EncodingFormat)
	}
	if req.Dimensions != nil {
		if *req.Dimensions < 1 {
			return nil, NewAPIError(http.StatusBadRequest, "dimensions", "dimensions must be at least 1, got %d", *req.Dimensions)
		}
		g.dims = *req.Dimensions
	}
	return g, nil
}

// embedding returns a deterministic unit vector of length dims for a prompt's token ids: equal
// token sequences give equal vectors, and each component mixes every token (an FNV-1a style
// hash chain over the ids, seeded by the component index), mapped to [-1, 1) and then
// L2-normalised as embedding models' outputs are. It is eppkit's own rule, not the simulator's.
func embedding(ids []uint32, dims int) []float32 {
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		h := uint64(14695981039346656037) ^ uint64(i)*0x9e3779b97f4a7c15
		for _, id := range ids {
			h ^= uint64(id)
			h *= 1099511628211
		}
		h ^= h >> 29
		x := float64(h>>11)/float64(1<<53)*2 - 1
		v[i] = float32(x)
		norm += x * x
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range v {
			v[i] *= inv
		}
	}
	return v
}

// tokenIDs returns a prompt's token ids (the dummy tokenizer's for text).
func (p promptInput) tokenIDs() []uint32 {
	if p.ids != nil {
		return p.ids
	}
	toks := p.engineTokens()
	out := make([]uint32, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

// appendEmbeddingsResponse appends vLLM's EmbeddingResponse JSON (entrypoints/openai protocol:
// id "embd-…", object "list", created, model, data[{index, object "embedding", embedding}], usage
// {prompt_tokens, total_tokens, completion_tokens 0}) for vectors in input order.
func appendEmbeddingsResponse(b []byte, id, model string, created int64, vectors [][]float32, asBase64 bool, promptTokens int) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, "embd-"+id)
	b = append(b, `,"object":"list","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"data":[`...)
	for i, vec := range vectors {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"object":"embedding","embedding":`...)
		if asBase64 {
			raw := make([]byte, 4*len(vec))
			for j, x := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(x))
			}
			b = appendJSONString(b, base64.StdEncoding.EncodeToString(raw))
		} else {
			b = append(b, '[')
			for j, x := range vec {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(promptTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(promptTokens), 10)
	b = append(b, `,"completion_tokens":0,"prompt_tokens_details":null}}`...)
	return b
}
