package modelrewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	"sigs.k8s.io/yaml"
)

// Named is one InferenceModelRewrite spec read from a file, with the name the store keeps it
// under.
type Named struct {
	// Name is "<file name>[<document index>]".
	Name string
	// Spec is the document, validated.
	Spec v1alpha2.InferenceModelRewriteSpec
}

// documentSeparator splits a YAML stream into documents ("---" on a line of its own).
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Parse reads the model rewrite rules of a file (source names it in errors and in Named.Name):
// one or more YAML (or JSON) documents separated by "---", each the spec of an
// InferenceModelRewrite as the CRD defines it — "rules" (matches, targets), and "poolRef", which
// is accepted and ignored (the rules apply to the EPP's pool). Empty documents are skipped.
// Decoding is strict and every error names the document and the field path
// (`rewrites.yaml: document 1: spec.rules[0].targets[0].weight: ...`): unknown fields, wrong
// types, out-of-range numbers and everything Validate refuses.
func Parse(data []byte, source string) ([]Named, error) {
	var out []Named
	for i, doc := range documentSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		fail := func(err error) ([]Named, error) { return nil, fmt.Errorf("%s: document %d: %w", source, i, err) }
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return fail(fmt.Errorf("not YAML: %w", err))
		}
		var generic any
		dec := json.NewDecoder(bytes.NewReader(js))
		if err := dec.Decode(&generic); err != nil {
			return fail(err)
		}
		if err := checkShape(generic, reflect.TypeOf(v1alpha2.InferenceModelRewriteSpec{}), "spec"); err != nil {
			return fail(err)
		}
		var spec v1alpha2.InferenceModelRewriteSpec
		if err := json.Unmarshal(js, &spec); err != nil {
			return fail(err)
		}
		if err := Validate(&spec); err != nil {
			return fail(err)
		}
		out = append(out, Named{Name: fmt.Sprintf("%s[%d]", source, i), Spec: spec})
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// LoadFile parses the file at path (Parse, with the file's base name as source) and sets its
// rewrites in a new store seeded with seed, in file order (an earlier document takes precedence
// over a later one, as an older InferenceModelRewrite does).
func LoadFile(path string, seed int64) (*Store, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rws, err := Parse(data, filepath.Base(path))
	if err != nil {
		return nil, err
	}
	s := NewStore(seed)
	for i, rw := range rws {
		if err := s.Set(rw.Name, time.Unix(0, int64(i)), &rw.Spec); err != nil {
			return nil, err // Parse validated it: unreachable
		}
	}
	return s, nil
}

// checkShape walks a decoded JSON value against the Go type it is to be decoded into and
// returns the first problem with its field path: an unknown field (keys are case-sensitive,
// unlike encoding/json), a value of the wrong JSON type, a number that is not an integer or out of
// range for an integer field.
func checkShape(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object", path)
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for k, e := range obj {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s.%s: unknown field", path, k)
			}
			if err := checkShape(e, ft, path+"."+k); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: must be a list", path)
		}
		for i, e := range arr {
			if err := checkShape(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object", path)
		}
		for k, e := range obj {
			if err := checkShape(e, t.Elem(), path+"."+k); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: must be a string", path)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: must be true or false", path)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("%s: must be an integer", path)
		}
		if bits := t.Bits(); f < -math.Pow(2, float64(bits-1)) || f >= math.Pow(2, float64(bits-1)) {
			return fmt.Errorf("%s: %v is out of range", path, f)
		}
	}
	return nil
}

// jsonFields collects the JSON names of t's exported fields and their types, descending into
// inline (untagged embedded) structs as encoding/json does.
func jsonFields(t reflect.Type, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			jsonFields(f.Type, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}
