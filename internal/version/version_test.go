package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @tag", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.2.3"}}, "v1.2.3"},
		{"go build in a checkout", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.0.0-20261201000000-abcdef123456+dirty"}},
			"v0.0.0-20261201000000-abcdef123456+dirty"},
		{"no VCS information", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "dev"},
		{"a module that requires eppkit", debug.BuildInfo{Main: debug.Module{Path: "example.com/epp", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "golang.org/x/net", Version: "v0.1.0"}, {Path: modulePath, Version: "v0.4.0"}}}, "v0.4.0"},
		{"replaced by a tagged module", debug.BuildInfo{Main: debug.Module{Path: "example.com/epp"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.4.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.4.1"}}}}, "v0.4.1"},
		{"replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/epp"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../.."}}}},
			"v0.0.0-00010101000000-000000000000"},
		{"eppkit absent", debug.BuildInfo{Main: debug.Module{Path: "example.com/other"}}, "dev"},
	} {
		if got := fromBuildInfo(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
