package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// decodeObject decodes body, which must be exactly one JSON object, into v. A wrong JSON type
// for a field is a 400 naming the field ("the field 'max_tokens' must be an integer, got a
// string"), as vLLM's request validation names the field (pydantic's loc); anything else
// malformed is a 400 "invalid JSON body". Unknown fields are ignored, as vLLM ignores them.
func decodeObject(body []byte, v any) *APIError {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return NewAPIError(http.StatusBadRequest, "", "invalid JSON body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return NewAPIError(http.StatusBadRequest, te.Field, "the field '%s' must be %s, got %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return NewAPIError(http.StatusBadRequest, "", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return NewAPIError(http.StatusBadRequest, "", "invalid JSON body: trailing data after the object")
	}
	return nil
}

// jsonKind names a Go kind the way a JSON API user reads it.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return "a " + kind
}

// isNull reports an absent or JSON-null raw value.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// promptInput is one prompt as the engine runs it: text for the dummy tokenizer, or token ids
// taken as given (ids != nil).
type promptInput struct {
	text string
	ids  []uint32
}

// engineTokens returns the prompt's tokens as echo mode repeats them: the tokenized text, or
// one token per id. The dummy tokenizer cannot decode an id, so a given id echoes as the text
// "t<id> ".
func (p promptInput) engineTokens() []engine.Token {
	if p.ids == nil {
		return engine.Tokenize(p.text)
	}
	out := make([]engine.Token, len(p.ids))
	for i, id := range p.ids {
		out[i] = engine.Token{Text: "t" + strconv.FormatUint(uint64(id), 10) + " ", ID: id}
	}
	return out
}

// numTokens is the prompt's length in tokens.
func (p promptInput) numTokens() int {
	if p.ids != nil {
		return len(p.ids)
	}
	return len(engine.Tokenize(p.text))
}

// parsePrompts parses an OpenAI prompt or embeddings input: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids (the four forms of the OpenAI API,
// vLLM's CompletionRequest.prompt and EmbeddingCompletionRequest.input). Token ids must be
// integers in [0, 2^32). Errors are 400 naming field (with the index of the offending element).
func parsePrompts(raw json.RawMessage, field string) ([]promptInput, *APIError) {
	if isNull(raw) {
		return nil, NewAPIError(http.StatusBadRequest, field, "the field '%s' is required", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []promptInput{{text: s}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badPromptForm(field)
	}
	if len(items) == 0 {
		return nil, NewAPIError(http.StatusBadRequest, field, "the field '%s' must not be an empty array", field)
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		out := make([]promptInput, len(items))
		for i, it := range items {
			if err := json.Unmarshal(it, &out[i].text); err != nil {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("%s[%d]", field, i), "%s[%d]: an array of strings must hold only strings", field, i)
			}
		}
		return out, nil
	case len(first) > 0 && first[0] == '[':
		out := make([]promptInput, len(items))
		for i, it := range items {
			ids, err := parseTokenIDs(it, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			if len(ids) == 0 {
				return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("%s[%d]", field, i), "%s[%d]: a token-id prompt must not be empty", field, i)
			}
			out[i].ids = ids
		}
		return out, nil
	}
	ids, err := parseTokenIDs(raw, field)
	if err != nil {
		return nil, err
	}
	return []promptInput{{ids: ids}}, nil
}

func badPromptForm(field string) *APIError {
	return NewAPIError(http.StatusBadRequest, field, "the field '%s' must be a string, an array of strings, an array of token ids or an array of arrays of token ids", field)
}

// parseTokenIDs parses a JSON array of integer token ids in [0, 2^32).
func parseTokenIDs(raw json.RawMessage, field string) ([]uint32, *APIError) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, badPromptForm(field)
	}
	ids := make([]uint32, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || v < 0 || v > math.MaxUint32 {
			return nil, NewAPIError(http.StatusBadRequest, fmt.Sprintf("%s[%d]", field, i), "%s[%d]: token id %s is not an integer in [0, 4294967295]", field, i, n)
		}
		ids[i] = uint32(v)
	}
	return ids, nil
}

// digest names inline data by identity: a short FNV-64a digest, so that equal data render equal
// prompt text and different data different text, without tokenizing the data itself.
func digest(kind, data string) string {
	h := fnv.New64a()
	h.Write([]byte(data))
	return fmt.Sprintf("[%s %016x]", kind, h.Sum64())
}

// mediaRef renders a media URL: an http(s) URL as itself, a data: URL or other inline data by
// its digest.
func mediaRef(kind, url string) string {
	if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
		return "[" + kind + " " + url + "]"
	}
	return digest(kind, url)
}

// chatPart is one content part of an OpenAI chat message (vLLM entrypoints/chat_utils.py part
// types): text, image_url, input_audio, file, refusal.
type chatPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
	File *struct {
		FileData string `json:"file_data"`
		FileID   string `json:"file_id"`
		Filename string `json:"filename"`
	} `json:"file"`
}

// contentPiece is one content part as the engine prompt renders it: its text (a non-text part by
// identity), whether it is text (echo mode repeats text parts only), or skip for a part that
// contributes nothing.
type contentPiece struct {
	text   string
	isText bool
	skip   bool
}

// renderContent renders a message content, a string as is or an array of parts each rendered by
// part, joined by newlines; echo is the text parts only. null is "" unless required. want names
// the array for the error ("content parts", "content blocks", ...).
func renderContent[P any](raw json.RawMessage, required bool, want string, part func(i int, p P) (contentPiece, error)) (prompt, echo string, err error) {
	if isNull(raw) {
		if required {
			return "", "", errors.New("content is required")
		}
		return "", "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s, nil
	}
	var parts []P
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", "", fmt.Errorf("want a string or an array of %s", want)
	}
	var pieces, texts []string
	for i, p := range parts {
		c, err := part(i, p)
		if err != nil {
			return "", "", err
		}
		if c.skip {
			continue
		}
		pieces = append(pieces, c.text)
		if c.isText {
			texts = append(texts, c.text)
		}
	}
	return strings.Join(pieces, "\n"), strings.Join(texts, "\n"), nil
}

// renderChatContent renders a chat message's content for the engine: a string as is, content
// parts in order (text parts as their text, non-text parts by their identity: URL or digest of
// inline data); null is empty. echo is the text parts only, joined by newlines.
func renderChatContent(raw json.RawMessage) (prompt, echo string, err error) {
	return renderContent(raw, false, "content parts", func(i int, p chatPart) (contentPiece, error) {
		switch p.Type {
		case "text":
			return contentPiece{text: p.Text, isText: true}, nil
		case "refusal":
			return contentPiece{text: p.Refusal}, nil
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return contentPiece{}, fmt.Errorf("part %d: an image_url part needs image_url.url", i)
			}
			return contentPiece{text: mediaRef("image", p.ImageURL.URL)}, nil
		case "input_audio":
			if p.InputAudio == nil || p.InputAudio.Data == "" {
				return contentPiece{}, fmt.Errorf("part %d: an input_audio part needs input_audio.data", i)
			}
			return contentPiece{text: digest("audio", p.InputAudio.Data)}, nil
		case "file":
			switch {
			case p.File == nil:
				return contentPiece{}, fmt.Errorf("part %d: a file part needs file", i)
			case p.File.FileData != "":
				return contentPiece{text: digest("file", p.File.FileData)}, nil
			case p.File.FileID != "":
				return contentPiece{text: "[file " + p.File.FileID + "]"}, nil
			}
			return contentPiece{}, fmt.Errorf("part %d: a file part needs file.file_data or file.file_id", i)
		}
		return contentPiece{}, fmt.Errorf("part %d: unknown content part type %q", i, p.Type)
	})
}
