package toolcache

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Snapshot is a source tarball of an upstream program the module proxy does not serve, kept
// beside the repository (DESIGN.md, ../shared/thirdparty/README.md): llm-d-router. The tool is
// built from it, not from a module under tools/: Build verifies File against File+".sha256",
// extracts it into the tool's cache directory (artifact SourceArtifact) and runs go build there;
// every dependency comes through the module proxy as for the other tools. Nothing of it is
// imported or copied into the project.
type Snapshot struct {
	// File is the tarball's name in the snapshot directory (ThirdPartyDir).
	File string
	// Prefix is the top directory every entry of the tarball sits under (git archive --prefix),
	// stripped on extraction.
	Prefix string
	// Module is the Go module path of the extracted tree (its go.mod), Commit the upstream
	// commit the tarball was made from (checked against the git archive pax header when present).
	Module, Commit string
}

// ThirdPartyEnv overrides the snapshot directory.
const ThirdPartyEnv = "EPPKIT_THIRDPARTY_DIR"

// SourceArtifact is the name of a snapshot tool's extracted source tree in its cache directory
// (`eppkit tools path llmd-router src`); binaries are built inside it.
const SourceArtifact = "src"

// sourceStamp, inside the extracted tree's parent, holds the sha256 of the tarball the tree
// was extracted from; a tree without it (an interrupted extraction) or with another sum is
// extracted again.
const sourceStamp = ".src.sha256"

// ErrSnapshotMissing is wrapped by Build when a snapshot tool has something to build and its
// source tarball is not in the snapshot directory; `eppkit tools build` exits 4 for it and the
// make targets that need the tool print "SKIPPED" (a fresh clone without ../shared/thirdparty).
var ErrSnapshotMissing = errors.New("source snapshot missing")

// ThirdPartyDir is the directory of the source snapshots: $EPPKIT_THIRDPARTY_DIR when set,
// else <repoRoot>/../shared/thirdparty (the repository's own path to it).
func ThirdPartyDir(repoRoot string) string {
	if d := os.Getenv(ThirdPartyEnv); d != "" {
		return d
	}
	return filepath.Clean(filepath.Join(repoRoot, "..", "shared", "thirdparty"))
}

// VerifySnapshot checks the tarball at file against the sum in file+".sha256" (the first field
// of its first line: `sha256sum` output or the bare sum) and returns the sum. A missing tarball
// wraps ErrSnapshotMissing; a mismatch names the file and both sums.
func VerifySnapshot(file string) (string, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s does not exist (set %s to the directory holding it; docs/tools.md)", ErrSnapshotMissing, file, ThirdPartyEnv)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	sumFile := file + ".sha256"
	b, err := os.ReadFile(sumFile)
	if err != nil {
		return "", fmt.Errorf("source snapshot %s: its checksum file: %w", file, err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields[0]) != sha256.Size*2 {
		return "", fmt.Errorf("source snapshot %s: %s holds no sha256 sum", file, sumFile)
	}
	want := strings.ToLower(fields[0])
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("source snapshot %s: %w", file, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return "", fmt.Errorf("source snapshot %s: sha256 mismatch: %s says %s, the file is %s; refusing to extract it", file, sumFile, want, got)
	}
	return got, nil
}

// snapshotSource makes sure the tool's source tree is extracted at dir/src from a verified
// tarball and returns its path: the tarball is always verified first (a tree extracted from
// another sum is replaced); extracted reports whether it extracted now.
func snapshotSource(t Tool, repoRoot, dir string, force bool) (src string, extracted bool, err error) {
	s := t.Snapshot
	file := filepath.Join(ThirdPartyDir(repoRoot), s.File)
	sum, err := VerifySnapshot(file)
	if err != nil {
		return "", false, err
	}
	src = filepath.Join(dir, SourceArtifact)
	if !force {
		if b, err := os.ReadFile(filepath.Join(dir, sourceStamp)); err == nil && strings.TrimSpace(string(b)) == sum {
			if _, err := os.Stat(filepath.Join(src, "go.mod")); err == nil {
				return src, false, nil
			}
		}
	}
	_ = os.Remove(filepath.Join(dir, sourceStamp))
	tmp := filepath.Join(dir, "."+SourceArtifact+".tmp")
	_ = os.RemoveAll(tmp)
	if err := extractTarGz(file, s.Prefix, s.Commit, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, fmt.Errorf("source snapshot %s: %w", file, err)
	}
	if err := os.RemoveAll(src); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp, src); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(filepath.Join(dir, sourceStamp), []byte(sum+"\n"), 0o644); err != nil {
		return "", false, err
	}
	return src, true, nil
}

// extractTarGz writes the entries of the gzipped tarball under prefix into dst (created),
// without the prefix. Only directories, regular files and symbolic links that stay inside dst
// are accepted. When commit is set and the tarball has git archive's pax global header, the
// commit it names must be commit.
func extractTarGz(file, prefix, commit, dst string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	defer gz.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			if c := h.PAXRecords["comment"]; commit != "" && c != "" && c != commit {
				return fmt.Errorf("made from commit %s, want %s", c, commit)
			}
			continue
		}
		name := strings.TrimPrefix(h.Name, prefix)
		if name == h.Name && prefix != "" {
			return fmt.Errorf("entry %q is not under %q", h.Name, prefix)
		}
		name = strings.TrimSuffix(name, "/")
		if name == "" {
			continue
		}
		if !fs.ValidPath(name) {
			return fmt.Errorf("entry %q leaves the tree", h.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			n++
		case tar.TypeSymlink:
			target := path.Join(path.Dir(name), h.Linkname)
			if path.IsAbs(h.Linkname) || !fs.ValidPath(target) {
				return fmt.Errorf("symbolic link %q -> %q leaves the tree", h.Name, h.Linkname)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
	if n == 0 {
		return fmt.Errorf("no files under %q", prefix)
	}
	return nil
}

// copySourceFiles copies the files of the extracted tree src matching a.Files (globs relative
// to the tree, path.Match syntax) into the directory dst, flat; a glob matching nothing is an
// error (the artifact says what it expects of the snapshot).
func copySourceFiles(src string, a Artifact, dst string) error {
	tmp := filepath.Join(filepath.Dir(dst), "."+a.Name+".tmp")
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	seen := map[string]string{}
	for _, g := range a.Files {
		matches, err := filepath.Glob(filepath.Join(src, filepath.FromSlash(g)))
		if err != nil {
			_ = os.RemoveAll(tmp)
			return err
		}
		if len(matches) == 0 {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("nothing in %s matches %s", src, g)
		}
		sort.Strings(matches)
		for _, m := range matches {
			base := filepath.Base(m)
			if prev, dup := seen[base]; dup {
				_ = os.RemoveAll(tmp)
				return fmt.Errorf("%s and %s have the same name", prev, m)
			}
			seen[base] = m
			b, err := os.ReadFile(m)
			if err != nil {
				_ = os.RemoveAll(tmp)
				return err
			}
			if err := os.WriteFile(filepath.Join(tmp, base), b, 0o644); err != nil {
				_ = os.RemoveAll(tmp)
				return err
			}
		}
	}
	_ = os.RemoveAll(dst)
	return os.Rename(tmp, dst)
}

// buildSnapshotTool is Build for a tool with a Snapshot: the tarball is verified (and the tree
// extracted if it is not, or was extracted from another sum) only when an artifact has to be
// produced, so cached artifacts need no snapshot.
func buildSnapshotTool(ctx context.Context, t Tool, sel []Artifact, dir, goCmd string, opts BuildOptions, logw io.Writer) ([]Result, error) {
	var results []Result
	src := ""
	for _, a := range sel {
		dst := filepath.Join(dir, a.Name)
		if cached(a, dst) && !opts.Force {
			results = append(results, Result{Artifact: a.Name, Path: dst, Skipped: true})
			continue
		}
		start := time.Now()
		if src == "" {
			file := filepath.Join(ThirdPartyDir(opts.RepoRoot), t.Snapshot.File)
			fmt.Fprintf(logw, "verifying %s against its .sha256 ...\n", file)
			s, extracted, err := snapshotSource(t, opts.RepoRoot, dir, opts.Force)
			if err != nil {
				return results, fmt.Errorf("tool %s-%s: %w", t.Name, t.Version, err)
			}
			if extracted {
				fmt.Fprintf(logw, "extracted %s into %s\n", t.Snapshot.File, s)
			}
			src = s
		}
		var err error
		switch a.Kind {
		case KindSnapshotSource:
			// snapshotSource above made it.
		case KindBinary:
			fmt.Fprintf(logw, "building %s-%s %s (%s in %s) ...\n", t.Name, t.Version, a.Name, a.Package, src)
			err = buildBinary(ctx, goCmd, filepath.Join(src, a.Subdir), a, dst, opts.Parallelism, logw)
		case KindSnapshotFiles:
			fmt.Fprintf(logw, "copying %s-%s %s (%s) ...\n", t.Name, t.Version, a.Name, strings.Join(a.Files, " "))
			err = copySourceFiles(src, a, dst)
		default:
			err = fmt.Errorf("artifact kind %d cannot come from a source snapshot", a.Kind)
		}
		if err != nil {
			return results, fmt.Errorf("tool %s-%s, artifact %s: %w", t.Name, t.Version, a.Name, err)
		}
		results = append(results, Result{Artifact: a.Name, Path: dst, Duration: time.Since(start)})
	}
	return results, nil
}
