// Package envoy validates Envoy bootstrap files (manifests/envoy/envoy.yaml) without running
// Envoy: the YAML is parsed into go-control-plane's envoy.config.bootstrap.v3.Bootstrap with
// protojson (unknown fields and unknown @type URLs are errors), and then the message and every
// google.protobuf.Any inside it, unpacked with anypb.UnmarshalNew, are checked with their
// protoc-gen-validate ValidateAll rules (the rules Envoy enforces when it loads the config).
//
// The typed configs an eppkit bootstrap may use are registered by the blank imports below
// (http_connection_manager, ext_proc, router, the stdout/file access loggers, the upstream HTTP
// protocol options, the original_dst and DNS cluster extensions). An Any of any other type fails
// with an error naming its type URL; import its package here to allow it.
package envoy

import (
	"errors"
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Typed configs (registered in protoregistry.GlobalTypes by import).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dns/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// validatorAll is what protoc-gen-validate generates on every go-control-plane message.
type validatorAll interface{ ValidateAll() error }

// Parse decodes a bootstrap in YAML or JSON into the v3 Bootstrap message. Unknown fields,
// unknown enum names and Any values of unregistered types are errors.
func Parse(b []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: YAML: %w", err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, bs); err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	return bs, nil
}

// Validate parses the bootstrap (Parse) and validates it: ValidateAll on the Bootstrap and on
// every message unpacked from an Any, however deep. The error joins every violation; each names
// the path of the Any it was found in (for example
// "static_resources.listeners[0].filter_chains[0].filters[0].typed_config
// <envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager>.http_filters[0].typed_config").
func Validate(b []byte) (*bootstrapv3.Bootstrap, error) {
	bs, err := Parse(b)
	if err != nil {
		return nil, err
	}
	return bs, ValidateMessage(bs)
}

// ValidateMessage runs ValidateAll on m and on every message packed in an Any inside m
// (recursively). It returns the joined violations, or nil.
func ValidateMessage(m proto.Message) error {
	_, err := validate(m)
	return err
}

// validate is ValidateMessage that also returns the path and type of every Any it unpacked.
func validate(m proto.Message) ([]string, error) {
	w := &walker{}
	if v, ok := m.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	w.walk(m.ProtoReflect(), "")
	return w.unpacked, errors.Join(w.errs...)
}

type walker struct {
	errs     []error
	unpacked []string
}

// walk visits every set field of msg; each Any is unpacked, validated and walked in turn.
func (w *walker) walk(msg protoreflect.Message, path string) {
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := string(fd.Name())
		if path != "" {
			p = path + "." + p
		}
		switch {
		case fd.IsList():
			if fd.Message() == nil {
				break
			}
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				w.visit(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				break
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.visit(mv.Message(), fmt.Sprintf("%s[%q]", p, k.String()))
				return true
			})
		case fd.Message() != nil:
			w.visit(v.Message(), p)
		}
		return true
	})
}

// visit walks one message value, unpacking it first when it is an Any.
func (w *walker) visit(m protoreflect.Message, path string) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		w.walk(m, path)
		return
	}
	inner, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: unpack %s: %w (import its package in manifests/envoy)", path, a.GetTypeUrl(), err))
		return
	}
	p := path + " <" + string(inner.ProtoReflect().Descriptor().FullName()) + ">"
	w.unpacked = append(w.unpacked, p)
	if v, ok := inner.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: %w", p, err))
		}
	}
	w.walk(inner.ProtoReflect(), p)
}
