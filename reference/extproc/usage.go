package extproc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/eppkit/eppkit/internal/vllmgrpc"
	"github.com/eppkit/eppkit/reference/framework"
)

// Usage parsing limits: a JSON response body longer than MaxJSONBodyBytes, or one SSE line longer
// than MaxSSELineBytes, is not parsed for usage (the bytes still pass through unchanged).
const (
	MaxJSONBodyBytes = 16 << 20
	MaxSSELineBytes  = 4 << 20
)

// UsageParser reads a response's usage from its body fed in arbitrary chunks (SPEC §5.2,
// §9.1), in the shape of the request's API:
//   - completions, chat completions, embeddings: the top-level "usage" object
//     (prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens) of
//     the JSON body or of any SSE event (the last well-formed one wins);
//   - Anthropic Messages: the JSON body's "usage" (input_tokens, output_tokens,
//     cache_read_input_tokens); streamed, message_start's message.usage, then each
//     message_delta's usage, whose counts replace the ones they carry;
//   - OpenAI Responses: the JSON body's "usage" (input_tokens, output_tokens, total_tokens,
//     input_tokens_details.cached_tokens); streamed, the response.usage of the
//     response.completed (or response.incomplete) event;
//   - vLLM's gRPC engine API (framework.APIVLLMGRPCGenerate, APIVLLMGRPCEmbed): the body is a
//     sequence of gRPC message frames (a flag byte, a 4-byte big-endian length, protobuf), each a
//     GenerateResponse or an EmbedResponse (internal/vllmgrpc); the counts of the last message
//     with a prompt or completion count win (prompt_tokens, completion_tokens, their sum as the
//     total, cached_tokens), as llm-d-router v0.10.0 parsers/vllmgrpc ParseResponse reads them.
//     A compressed or malformed message is skipped, a frame over MaxJSONBodyBytes ends parsing;
//   - any other API: no usage.
//
// In SSE mode it splits the stream into lines and events itself, so an event, a line, or the
// "data: [DONE]" marker may be split anywhere across chunks. In JSON mode it buffers the body
// and reads it at Finish. A malformed usage block (not an object, a count that is not a
// non-negative integer) is ignored, as is malformed JSON; a count the response does not carry
// stays nil (absent usage is absent, never zero). Not safe for concurrent use.
type UsageParser struct {
	api     framework.API
	sse     bool
	buf     []byte // SSE: the current incomplete line; JSON: the whole body
	data    []byte // SSE: data lines of the current event, joined by '\n'
	hasData bool
	skip    bool // the current line (SSE) or the body (JSON) exceeded its limit
	usage   *framework.Usage
	done    bool
	grpc    bool // the body is gRPC message frames (vLLM's gRPC engine API)
}

// NewUsageParser returns a parser for the response of a request of api (framework.API; ""
// reads the OpenAI shape), streamed as SSE (sse true: Content-Type text/event-stream) or a JSON
// body.
func NewUsageParser(api framework.API, sse bool) *UsageParser {
	grpc := api == framework.APIVLLMGRPCGenerate || api == framework.APIVLLMGRPCEmbed
	return &UsageParser{api: api, sse: sse && !grpc, grpc: grpc}
}

// Write feeds the next chunk of the body.
func (p *UsageParser) Write(chunk []byte) {
	if p.grpc {
		p.writeGRPC(chunk)
		return
	}
	if !p.sse {
		if p.skip {
			return
		}
		if len(p.buf)+len(chunk) > MaxJSONBodyBytes {
			p.skip, p.buf = true, nil
			return
		}
		p.buf = append(p.buf, chunk...)
		return
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			p.appendLine(chunk)
			return
		}
		p.appendLine(chunk[:i])
		chunk = chunk[i+1:]
		p.endLine()
	}
}

func (p *UsageParser) appendLine(b []byte) {
	if p.skip {
		return
	}
	if len(p.buf)+len(b) > MaxSSELineBytes {
		p.skip, p.buf = true, p.buf[:0]
		return
	}
	p.buf = append(p.buf, b...)
}

// endLine processes one complete SSE line (WHATWG "server-sent events" rules, the subset
// OpenAI-compatible servers use: "data:" fields, comments, blank line = end of event).
func (p *UsageParser) endLine() {
	line := bytes.TrimSuffix(p.buf, []byte("\r"))
	skipped := p.skip
	p.buf, p.skip = p.buf[:0], false
	if skipped {
		return
	}
	if len(line) == 0 {
		p.dispatch()
		return
	}
	if line[0] == ':' { // comment
		return
	}
	field, value, found := bytes.Cut(line, []byte(":"))
	if !found || string(field) != "data" {
		return
	}
	value = bytes.TrimPrefix(value, []byte(" "))
	if p.hasData {
		p.data = append(p.data, '\n')
	}
	p.data = append(p.data, value...)
	p.hasData = true
}

// dispatch handles the event whose data lines were collected.
func (p *UsageParser) dispatch() {
	if !p.hasData {
		return
	}
	data := bytes.TrimSpace(p.data)
	p.data, p.hasData = p.data[:0], false
	if bytes.Equal(data, []byte("[DONE]")) {
		p.done = true
		return
	}
	p.event(data)
}

// event takes the usage of one SSE event's data.
func (p *UsageParser) event(data []byte) {
	switch p.api {
	case framework.APIOther:
	case framework.APIMessages:
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"message"`
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		switch ev.Type {
		case "message_start":
			if u := anthropicUsage(ev.Message.Usage); u != nil {
				p.usage = u
			}
		case "message_delta":
			if u := anthropicUsage(ev.Usage); u != nil {
				p.usage = mergeUsage(p.usage, u)
			}
		}
	case framework.APIResponses:
		var ev struct {
			Type     string `json:"type"`
			Response struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &ev) != nil || (ev.Type != "response.completed" && ev.Type != "response.incomplete") {
			return
		}
		if u := responsesUsage(ev.Response.Usage); u != nil {
			p.usage = u
		}
	default:
		if u := openAIUsage(topLevelUsage(data)); u != nil {
			p.usage = u
		}
	}
}

// Finish ends the body: in SSE mode it processes a last line and event without a trailing
// newline; in JSON mode it parses the buffered body. It returns Usage().
func (p *UsageParser) Finish() *framework.Usage {
	if p.grpc {
		p.buf = nil // an incomplete last frame carries nothing
		return p.usage
	}
	if p.sse {
		if len(p.buf) > 0 || p.skip {
			p.endLine()
		}
		p.dispatch()
		return p.usage
	}
	if !p.skip && len(p.buf) > 0 {
		raw := topLevelUsage(p.buf)
		var u *framework.Usage
		switch p.api {
		case framework.APIOther:
		case framework.APIMessages:
			u = anthropicUsage(raw)
		case framework.APIResponses:
			u = responsesUsage(raw)
		default:
			u = openAIUsage(raw)
		}
		if u != nil {
			p.usage = u
		}
	}
	p.buf, p.skip = nil, false
	return p.usage
}

// Usage returns the usage found so far, nil when none.
func (p *UsageParser) Usage() *framework.Usage { return p.usage }

// Done reports whether the SSE stream's "data: [DONE]" marker has been seen.
func (p *UsageParser) Done() bool { return p.done }

// topLevelUsage returns the raw top-level "usage" member of a JSON object, nil when the data is
// not an object or has none.
func topLevelUsage(data []byte) json.RawMessage {
	var env struct {
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil
	}
	return env.Usage
}

// usageField is one count of a usage object: its JSON name and where it goes.
type usageField struct {
	name string
	dst  **int
}

// readUsage decodes a usage object: counts named by fields (each a non-negative integer; absent
// or null = nil), and cached tokens under details (the first of the detail objects present that
// carries cached_tokens). Any other shape returns nil: a malformed block is ignored whole.
func readUsage(raw json.RawMessage, fields []usageField, details []string, cached **int) bool {
	if len(raw) == 0 {
		return false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return false
	}
	for _, f := range fields {
		v, ok := obj[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		n, ok := count(v)
		if !ok {
			return false
		}
		*f.dst = &n
	}
	for _, key := range details {
		v, ok := obj[key]
		if !ok || string(v) == "null" {
			continue
		}
		var d map[string]json.RawMessage
		if err := json.Unmarshal(v, &d); err != nil {
			return false
		}
		if c, ok := d["cached_tokens"]; ok && string(c) != "null" {
			n, ok := count(c)
			if !ok {
				return false
			}
			*cached = &n
		}
	}
	return true
}

// openAIUsage reads an OpenAI usage object: prompt_tokens, completion_tokens, total_tokens and
// prompt_tokens_details.cached_tokens (vLLM's and OpenAI's name; upstream v1.5.0's parser reads
// "prompt_token_details", which no server sends — both are accepted). nil when raw is absent or
// malformed.
func openAIUsage(raw json.RawMessage) *framework.Usage {
	u := &framework.Usage{}
	if !readUsage(raw, []usageField{{"prompt_tokens", &u.PromptTokens}, {"completion_tokens", &u.CompletionTokens},
		{"total_tokens", &u.TotalTokens}}, []string{"prompt_tokens_details", "prompt_token_details"}, &u.CachedTokens) {
		return nil
	}
	return u
}

// anthropicUsage reads an Anthropic Messages usage object: input_tokens (PromptTokens),
// output_tokens (CompletionTokens) and cache_read_input_tokens (CachedTokens); Anthropic has no
// total. nil when raw is absent or malformed.
func anthropicUsage(raw json.RawMessage) *framework.Usage {
	u := &framework.Usage{}
	if !readUsage(raw, []usageField{{"input_tokens", &u.PromptTokens}, {"output_tokens", &u.CompletionTokens},
		{"cache_read_input_tokens", &u.CachedTokens}}, nil, nil) {
		return nil
	}
	return u
}

// responsesUsage reads an OpenAI Responses usage object: input_tokens, output_tokens,
// total_tokens and input_tokens_details.cached_tokens. nil when raw is absent or malformed.
func responsesUsage(raw json.RawMessage) *framework.Usage {
	u := &framework.Usage{}
	if !readUsage(raw, []usageField{{"input_tokens", &u.PromptTokens}, {"output_tokens", &u.CompletionTokens},
		{"total_tokens", &u.TotalTokens}}, []string{"input_tokens_details"}, &u.CachedTokens) {
		return nil
	}
	return u
}

// mergeUsage returns base with every count that u carries replaced by u's.
func mergeUsage(base, u *framework.Usage) *framework.Usage {
	if base == nil {
		return u
	}
	out := *base
	for _, f := range []struct{ dst, src **int }{{&out.PromptTokens, &u.PromptTokens}, {&out.CompletionTokens, &u.CompletionTokens},
		{&out.TotalTokens, &u.TotalTokens}, {&out.CachedTokens, &u.CachedTokens}} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	return &out
}

// count decodes a non-negative integer token count (a float with no fraction is accepted).
func count(v json.RawMessage) (int, bool) {
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, false
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

// grpcFrameHeader is the length of a gRPC message frame's header.
const grpcFrameHeader = 5

// writeGRPC reads every complete gRPC message frame buffered so far.
func (p *UsageParser) writeGRPC(chunk []byte) {
	if p.skip {
		return
	}
	p.buf = append(p.buf, chunk...)
	for len(p.buf) >= grpcFrameHeader {
		n := binary.BigEndian.Uint32(p.buf[1:grpcFrameHeader])
		if n > MaxJSONBodyBytes {
			p.skip, p.buf = true, nil
			return
		}
		end := grpcFrameHeader + int(n)
		if len(p.buf) < end {
			return
		}
		if p.buf[0] == 0 { // a compressed message (flag 1) is not read
			p.grpcMessage(p.buf[grpcFrameHeader:end])
		}
		p.buf = append(p.buf[:0], p.buf[end:]...)
	}
}

// grpcMessage reads the counts of one GenerateResponse or EmbedResponse.
func (p *UsageParser) grpcMessage(msg []byte) {
	var prompt, completion, cached uint32
	switch p.api {
	case framework.APIVLLMGRPCGenerate:
		var r vllmgrpc.GenerateResponse
		if proto.Unmarshal(msg, &r) != nil {
			return
		}
		switch {
		case r.GetChunk() != nil:
			c := r.GetChunk()
			prompt, completion, cached = c.GetPromptTokens(), c.GetCompletionTokens(), c.GetCachedTokens()
		case r.GetComplete() != nil:
			c := r.GetComplete()
			prompt, completion, cached = c.GetPromptTokens(), c.GetCompletionTokens(), c.GetCachedTokens()
		default:
			return
		}
	case framework.APIVLLMGRPCEmbed:
		var r vllmgrpc.EmbedResponse
		if proto.Unmarshal(msg, &r) != nil {
			return
		}
		prompt = r.GetPromptTokens()
	}
	if prompt == 0 && completion == 0 {
		return
	}
	pt, ct, tt, ca := int(prompt), int(completion), int(prompt)+int(completion), int(cached)
	p.usage = &framework.Usage{PromptTokens: &pt, CompletionTokens: &ct, TotalTokens: &tt, CachedTokens: &ca}
}
