package framework

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRegistry(t *testing.T) {
	f := func(string, json.RawMessage, Handle) (Plugin, error) { return nil, nil }
	r := NewRegistry()
	tests := []struct {
		name    string
		typ     string
		f       FactoryFunc
		wantErr string
	}{
		{"first registration", "b-type", f, ""},
		{"second type", "a-type", f, ""},
		{"duplicate", "b-type", f, `registry: plugin type "b-type" is already registered`},
		{"empty type", "", f, "registry: plugin type and factory are required"},
		{"nil factory", "c-type", nil, "registry: plugin type and factory are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Register(tc.typ, tc.f)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Fatalf("Register(%q) error = %q, want %q", tc.typ, got, tc.wantErr)
			}
		})
	}
	if diff := cmp.Diff([]string{"a-type", "b-type"}, r.Types()); diff != "" {
		t.Errorf("Types (-want +got):\n%s", diff)
	}
	if _, ok := r.Factory("a-type"); !ok {
		t.Error("Factory(a-type) missing")
	}
	if _, ok := r.Factory("zzz"); ok {
		t.Error("Factory(zzz) found")
	}
	r.RegisterDefaultProducer("key", "a-type")
	if typ, ok := r.DefaultProducer("key"); !ok || typ != "a-type" {
		t.Errorf("DefaultProducer = %q, %v", typ, ok)
	}
	if _, ok := r.DefaultProducer("other"); ok {
		t.Error("DefaultProducer(other) found")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustRegister of a duplicate did not panic")
		}
	}()
	r.MustRegister("a-type", f)
}

// TestRegistryDecorate: a decorated type builds through the wrapper, which sees the original
// factory; undecorated types are untouched; an unknown type or a nil wrapper is an error.
func TestRegistryDecorate(t *testing.T) {
	r := NewRegistry()
	build := func(name string, _ json.RawMessage, _ Handle) (Plugin, error) {
		return testPlugin{TypedName{Type: "t", Name: name}}, nil
	}
	r.MustRegister("t", build)
	r.MustRegister("u", build)
	err := r.Decorate("t", func(inner FactoryFunc) FactoryFunc {
		return func(name string, params json.RawMessage, h Handle) (Plugin, error) {
			return inner("wrapped-"+name, params, h)
		}
	})
	if err != nil {
		t.Fatalf("Decorate(t): %v", err)
	}
	for typ, want := range map[string]string{"t": "wrapped-x", "u": "x"} {
		f, _ := r.Factory(typ)
		p, err := f("x", nil, nil)
		if err != nil || p.TypedName().Name != want {
			t.Errorf("factory of %s built %v, %v; want the name %q", typ, p, err, want)
		}
	}
	if err := r.Decorate("nope", func(f FactoryFunc) FactoryFunc { return f }); err == nil ||
		err.Error() != `registry: plugin type "nope" is not registered` {
		t.Errorf("Decorate(nope) error = %v", err)
	}
	if err := r.Decorate("t", nil); err == nil {
		t.Error("Decorate with a nil wrapper: no error")
	}
}

type testPlugin struct{ tn TypedName }

func (p testPlugin) TypedName() TypedName { return p.tn }

func TestDecodeParameters(t *testing.T) {
	type params struct {
		BlockSize int  `json:"blockSize"`
		AutoTune  bool `json:"autoTune"`
	}
	tests := []struct {
		name    string
		in      string
		want    params
		wantErr string
	}{
		{"absent keeps defaults", "", params{BlockSize: 16, AutoTune: true}, ""},
		{"null keeps defaults", "null", params{BlockSize: 16, AutoTune: true}, ""},
		{"fields override", `{"blockSize": 32}`, params{BlockSize: 32, AutoTune: true}, ""},
		{"unknown field", `{"blockSze": 32}`, params{}, `parameters: json: unknown field "blockSze"`},
		{"wrong type", `{"blockSize": "x"}`, params{}, `parameters: json: cannot unmarshal string into Go struct field params.blockSize of type int`},
		{"trailing data", `{"blockSize": 1} {}`, params{}, "parameters: trailing data after the JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := params{BlockSize: 16, AutoTune: true}
			err := DecodeParameters(json.RawMessage(tc.in), &got)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
