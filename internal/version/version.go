// Package version is the eppkit version every report and `eppkit --version` carry.
package version

import "runtime/debug"

// modulePath is eppkit's Go module.
const modulePath = "github.com/eppkit/eppkit"

// version is set at link time by `make build` and the image build:
// -ldflags "-X github.com/eppkit/eppkit/internal/version.version=$(git describe --tags --always --dirty)".
var version string

// Version is the eppkit version: the one set at link time; else the module version the Go
// toolchain recorded in the binary (`go install github.com/eppkit/eppkit/cmd/eppkit@v1.2.3`
// records v1.2.3; a `go build` in a git checkout records a pseudo-version with the commit; a
// test binary of a module that requires eppkit records the required version); else "dev".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo picks eppkit's module version out of bi; "dev" when it records none.
func fromBuildInfo(bi *debug.BuildInfo) string {
	mod := &bi.Main
	if mod.Path != modulePath {
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
				break
			}
		}
	}
	if mod == nil {
		return "dev"
	}
	v := mod.Version
	if mod.Replace != nil && mod.Replace.Version != "" {
		v = mod.Replace.Version
	}
	if v == "" || v == "(devel)" {
		return "dev"
	}
	return v
}
