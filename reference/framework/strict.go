package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// checkFieldCase closes the one gap of encoding/json's DisallowUnknownFields: it matches object
// keys to struct fields case-insensitively, so `Weight:` or `blocksize:` would be accepted
// silently. When dst points to a struct and data is a JSON object, every top-level key must equal
// a field name exactly (json tag, or the Go name of an untagged field; fields of embedded structs
// included). A key that differs only in case is an error naming both spellings, in the form of
// encoding/json's unknown-field error. Anything else (not an object, not a struct) is left to the
// decoder.
func checkFieldCase(data []byte, dst any) error {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil // the decoder reports it
	}
	fields := map[string]bool{}
	collectJSONFields(t.Elem(), fields, 0)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if fields[k] {
			continue
		}
		for f := range fields {
			if strings.EqualFold(f, k) {
				return fmt.Errorf("json: unknown field %q (field names are case-sensitive: %q)", k, f)
			}
		}
	}
	return nil
}

// collectJSONFields adds the JSON names of t's fields, descending into untagged embedded structs
// as encoding/json does.
func collectJSONFields(t reflect.Type, out map[string]bool, depth int) {
	if depth > 8 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectJSONFields(ft, out, depth+1)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
}
