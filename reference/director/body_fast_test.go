package director

import (
	"bytes"
	"encoding/json"
	"testing"
)

// bodySeeds are bodies that exercise topLevelFast's edges: escapes in keys and strings, nested
// values with brackets inside strings, duplicate keys, white space, non-ASCII text, invalid
// UTF-8, trailing data and non-objects.
var bodySeeds = []string{
	`{"model":"m","prompt":"hello"}`,
	`{}`,
	` { "model" : "m" , "prompt" : [ "a" , "b\"]}" ] , "n" : -1.5e3 , "t":true,"f":false,"z":null } `,
	`{"mo\u0064el":"m","prompt":"tab\there \\\" quote"}`,
	`{"model":"m","model":"n","prompt":"x"}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"{[}]\\"}]}]}`,
	`{"model":"ünï","prompt":"日本語"}`,
	"{\"model\":\"m\xff\",\"prompt\":\"a\xfe\"}",
	"{\"k\xff\":1}",
	`{"model":"m","prompt":"a"} {}`,
	`{"model":"m","prompt":"a"} x`,
	`{"a":1,}`,
	`[1,2]`,
	`{"a":"\\"}`,
	`{"a":"\\\\"}`,
	`{"a":{"b":{"c":[[],{}]}},"d":""}`,
}

// FuzzTopLevelFields: the one-pass splitter returns exactly what decoding into
// map[string]json.RawMessage returns (same members, same bytes, same error text), and
// plainString agrees with json.Unmarshal on every string it accepts.
func FuzzTopLevelFields(f *testing.F) {
	for _, s := range bodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return
		}
		got, gotErr := topLevelFields(trimmed)
		want, wantErr := topLevelDecode(trimmed)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("body %q: error %v, encoding/json %v", body, gotErr, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("body %q: %d members, encoding/json %d", body, len(got), len(want))
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
				t.Fatalf("body %q: member %q = %q (present %v), encoding/json %q", body, k, g, ok, v)
			}
		}
		for _, v := range got {
			if s, ok := plainString(v); ok {
				var w string
				if err := json.Unmarshal(v, &w); err != nil || w != s {
					t.Fatalf("plainString(%q) = %q, encoding/json %q (%v)", v, s, w, err)
				}
			}
		}
	})
}

// BenchmarkParseBody: one 2 KB and one 32 KB completions body (the shape `eppkit bench extproc`
// sends), parsed by ParseBody.
func BenchmarkParseBody(b *testing.B) {
	for _, size := range []int{2 << 10, 32 << 10} {
		body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"` +
			string(bytes.Repeat([]byte("lorem "), size/6)) + `","max_tokens":16,"stream":false}`)
		b.Run(map[int]string{2 << 10: "2KB", 32 << 10: "32KB"}[size], func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := ParseBody(APICompletions, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzDecodeScalars: decodeString and decodeBool give exactly json.Unmarshal's value and
// success on any raw value (the fast paths must never accept what encoding/json refuses).
func FuzzDecodeScalars(f *testing.F) {
	for _, s := range []string{`"m"`, `"a\"b"`, `"ü"`, `true`, `false`, `null`, ` true`, `1`, `"`, `""`, "\"\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var gs, ws string
		gErr, wErr := decodeString(raw, &gs), json.Unmarshal(raw, &ws)
		if (gErr == nil) != (wErr == nil) || gs != ws {
			t.Fatalf("decodeString(%q) = %q, %v; encoding/json %q, %v", raw, gs, gErr, ws, wErr)
		}
		var gb, wb bool
		gErr, wErr = decodeBool(raw, &gb), json.Unmarshal(raw, &wb)
		if (gErr == nil) != (wErr == nil) || gb != wb {
			t.Fatalf("decodeBool(%q) = %v, %v; encoding/json %v, %v", raw, gb, gErr, wb, wErr)
		}
	})
}
