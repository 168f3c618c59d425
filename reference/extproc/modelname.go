package extproc

import (
	"bytes"
	"encoding/json"
)

// modelRestorer rewrites the response body's model name back to the one the client sent, when
// the request was served by another model (a model-name rewrite header or an
// InferenceModelRewrite; SPEC §10, GIE #2769, llm-d-router v0.10.0 pkg/epp/handlers/server.go
// rewriteModelName; docs/request-surface.md §3).
//
// Every member named "model" whose value is the string target, at any depth of a JSON value
// (OpenAI's top-level model, Responses' response.model, Anthropic's message_start
// message.model), is set to incoming. An SSE response (content-type text/event-stream) is
// rewritten line by line: only complete lines are rewritten and released, the incomplete last
// line of a chunk is held until the next chunk completes it, so a "model" member split across
// ext_proc chunks is still rewritten [eppkit]. llm-d-router v0.10.0 replaces the bytes
// `"model":"<target>"` (or with one space after the colon) within each chunk, and misses a
// member split across two. Any other response is held to its end and rewritten once, as
// upstream buffers a non-streamed response (finishResponse).
type modelRestorer struct {
	target, incoming string
	sse              bool
	pending          []byte
}

// newModelRestorer returns the restorer of one response, nil when there is nothing to restore
// (no rewrite, or either name unknown).
func newModelRestorer(target, incoming string, sse bool) *modelRestorer {
	if target == "" || incoming == "" || target == incoming {
		return nil
	}
	return &modelRestorer{target: target, incoming: incoming, sse: sse}
}

// write takes one response body chunk and returns the bytes that can be released now (possibly
// none); eos releases everything held.
func (m *modelRestorer) write(chunk []byte, eos bool) []byte {
	m.pending = append(m.pending, chunk...)
	if !m.sse {
		if !eos {
			return nil
		}
		out := restoreModelJSON(m.pending, m.target, m.incoming)
		m.pending = nil
		return out
	}
	cut := bytes.LastIndexByte(m.pending, '\n') + 1
	if eos {
		cut = len(m.pending)
	}
	if cut == 0 {
		return nil
	}
	ready := m.pending[:cut]
	var out []byte
	for len(ready) > 0 {
		line := ready
		if i := bytes.IndexByte(ready, '\n'); i >= 0 {
			line = ready[:i+1]
		}
		ready = ready[len(line):]
		out = append(out, restoreSSELine(line, m.target, m.incoming)...)
	}
	m.pending = append([]byte(nil), m.pending[cut:]...)
	return out
}

// restoreSSELine rewrites the JSON payload of one SSE "data:" line (line ending included);
// other lines, and payloads that are not JSON ([DONE]), are returned as they are.
func restoreSSELine(line []byte, target, incoming string) []byte {
	body := bytes.TrimRight(line, "\r\n")
	if !bytes.HasPrefix(body, []byte("data:")) {
		return line
	}
	payload := body[len("data:"):]
	start := len(line) - len(bytes.TrimLeft(line[len("data:"):], " ")) // offset of the payload proper
	payload = bytes.TrimLeft(payload, " ")
	if !json.Valid(payload) {
		return line
	}
	restored := restoreModelJSON(payload, target, incoming)
	if len(restored) == len(payload) && bytes.Equal(restored, payload) {
		return line
	}
	out := make([]byte, 0, len(line)+len(restored)-len(payload))
	out = append(out, line[:start]...)
	out = append(out, restored...)
	return append(out, line[start+len(payload):]...)
}

// restoreModelJSON returns doc with the value of every object member "model" that is the
// string target replaced by the JSON string incoming. A doc that is not valid JSON is returned
// unchanged.
func restoreModelJSON(doc []byte, target, incoming string) []byte {
	if !json.Valid(doc) || !bytes.Contains(doc, []byte(`"model"`)) {
		return doc
	}
	var spans [][2]int // byte ranges of the string values to replace
	type frame struct{ object, expectKey bool }
	var stack []frame
	lastKey := ""
	for i := 0; i < len(doc); {
		switch c := doc[i]; c {
		case '{':
			stack = append(stack, frame{object: true, expectKey: true})
			i++
		case '[':
			stack = append(stack, frame{})
			i++
		case '}', ']':
			stack = stack[:len(stack)-1]
			i++
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
			i++
		case ':':
			stack[len(stack)-1].expectKey = false
			i++
		case '"':
			end := stringEnd(doc, i)
			isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expectKey
			if isKey {
				lastKey = unquote(doc[i:end])
			} else if len(stack) > 0 && stack[len(stack)-1].object && lastKey == "model" && unquote(doc[i:end]) == target {
				spans = append(spans, [2]int{i, end})
			}
			i = end
		default:
			i++
		}
	}
	if len(spans) == 0 {
		return doc
	}
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false)
	_ = e.Encode(incoming) // a string always encodes
	repl := bytes.TrimRight(enc.Bytes(), "\n")
	out := make([]byte, 0, len(doc)+len(spans)*(len(repl)-len(target)))
	prev := 0
	for _, sp := range spans {
		out = append(out, doc[prev:sp[0]]...)
		out = append(out, repl...)
		prev = sp[1]
	}
	return append(out, doc[prev:]...)
}

// stringEnd returns the offset just after the JSON string starting at doc[i] ('"').
func stringEnd(doc []byte, i int) int {
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(doc)
}

// unquote decodes a JSON string token (quotes included); "" when it does not decode.
func unquote(tok []byte) string {
	if bytes.IndexByte(tok, '\\') < 0 {
		return string(tok[1 : len(tok)-1])
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return ""
	}
	return s
}
