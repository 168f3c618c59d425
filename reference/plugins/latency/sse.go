package latency

import (
	"bytes"
	"encoding/json"
)

// maxSSELine bounds the bytes kept for one unfinished SSE line; a longer line is dropped (it
// cannot be a token event of a sane server) so a misbehaving upstream cannot grow memory.
const maxSSELine = 1 << 20

// tokenCounter counts token events in an OpenAI SSE stream fed in arbitrary chunks: a
// `data: {...}` event with at least one choice whose `text` (completions) or `delta.content`
// (chat) is non-empty. Role-only chunks, usage chunks and `data: [DONE]` are not tokens.
// Not safe for concurrent use.
type tokenCounter struct {
	partial []byte
	tokens  int
	dropped bool
}

type sseEvent struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
}

// write feeds one chunk and returns how many token events it completed.
func (c *tokenCounter) write(chunk []byte) int {
	n := 0
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !c.dropped {
				c.partial = append(c.partial, chunk...)
				if len(c.partial) > maxSSELine {
					c.partial, c.dropped = nil, true
				}
			}
			break
		}
		line := chunk[:i]
		if c.dropped {
			c.dropped = false
		} else {
			if len(c.partial) > 0 {
				line = append(c.partial, line...)
				c.partial = c.partial[:0]
			}
			if isTokenEvent(line) {
				n++
			}
		}
		chunk = chunk[i+1:]
	}
	c.tokens += n
	return n
}

func isTokenEvent(line []byte) bool {
	line = bytes.TrimRight(line, "\r")
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return false
	}
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 || payload[0] != '{' {
		return false // "[DONE]" or garbage
	}
	if !bytes.Contains(payload, []byte(`"text"`)) && !bytes.Contains(payload, []byte(`"content"`)) {
		return false // usage or role-only chunks: no need to decode
	}
	var ev sseEvent
	if json.Unmarshal(payload, &ev) != nil {
		return false
	}
	for _, ch := range ev.Choices {
		if ch.Text != "" || ch.Delta.Content != "" {
			return true
		}
	}
	return false
}
