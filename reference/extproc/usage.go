package extproc

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/eppkit/eppkit/internal/mutant"
	"github.com/eppkit/eppkit/reference/framework"
)

// Usage parsing limits: a JSON response body longer than MaxJSONBodyBytes, or one SSE line longer
// than MaxSSELineBytes, is not parsed for usage (the bytes still pass through unchanged).
const (
	MaxJSONBodyBytes = 16 << 20
	MaxSSELineBytes  = 4 << 20
)

// UsageParser reads the OpenAI usage block from a response body fed in arbitrary chunks
// (SPEC §5.2). In SSE mode it splits the stream into lines and events itself, so an event, a
// line, or the "data: [DONE]" marker may be split anywhere across chunks; the last event that
// carries a well-formed usage object wins. In JSON mode it buffers the body and reads the
// top-level "usage" at Finish. A malformed usage block (not an object, a count that is not a
// non-negative integer) is ignored, as is malformed JSON. Not safe for concurrent use.
type UsageParser struct {
	sse     bool
	buf     []byte // SSE: the current incomplete line; JSON: the whole body
	data    []byte // SSE: data lines of the current event, joined by '\n'
	hasData bool
	skip    bool // the current line (SSE) or the body (JSON) exceeded its limit
	usage   *framework.Usage
	done    bool
}

// NewUsageParser returns a parser for an SSE stream (sse true, Content-Type text/event-stream)
// or a JSON body.
func NewUsageParser(sse bool) *UsageParser { return &UsageParser{sse: sse} }

// Write feeds the next chunk of the body.
func (p *UsageParser) Write(chunk []byte) {
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
			if mutant.Enabled && mutant.On(mutant.UsageSplitDonePanics) {
				mutantPanicOnSplitDone(p.buf)
			}
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
	if u := usageFromJSON(data); u != nil {
		p.usage = u
	}
}

// Finish ends the body: in SSE mode it processes a last line and event without a trailing
// newline; in JSON mode it parses the buffered body. It returns Usage().
func (p *UsageParser) Finish() *framework.Usage {
	if p.sse {
		if len(p.buf) > 0 || p.skip {
			p.endLine()
		}
		p.dispatch()
		return p.usage
	}
	if !p.skip && len(p.buf) > 0 {
		if u := usageFromJSON(p.buf); u != nil {
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

// usageFromJSON returns the well-formed top-level "usage" object of a JSON object, or nil.
// Counts accepted: prompt_tokens, completion_tokens, total_tokens (non-negative integers,
// absent = 0) and prompt_tokens_details.cached_tokens (vLLM and OpenAI name;
// upstream v1.5.0's parser reads "prompt_token_details", which no server sends — both are
// accepted). Any other shape returns nil.
func usageFromJSON(data []byte) *framework.Usage {
	var env struct {
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(data, &env); err != nil || len(env.Usage) == 0 {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(env.Usage, &raw); err != nil || raw == nil {
		return nil
	}
	u := &framework.Usage{}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"prompt_tokens", &u.PromptTokens}, {"completion_tokens", &u.CompletionTokens}, {"total_tokens", &u.TotalTokens}} {
		v, ok := raw[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		n, ok := count(v)
		if !ok {
			return nil
		}
		*f.dst = n
	}
	for _, key := range []string{"prompt_tokens_details", "prompt_token_details"} {
		v, ok := raw[key]
		if !ok || string(v) == "null" {
			continue
		}
		var details map[string]json.RawMessage
		if err := json.Unmarshal(v, &details); err != nil {
			return nil
		}
		if c, ok := details["cached_tokens"]; ok && string(c) != "null" {
			n, ok := count(c)
			if !ok {
				return nil
			}
			u.CachedTokens = n
		}
	}
	return u
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
