package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Images are the references kubeadm runs the control plane from, by component.
type Images struct {
	APIServer, ControllerManager, Scheduler, Proxy, Etcd, CoreDNS, Pause string
}

func (w Images) all() []string {
	return []string{w.APIServer, w.ControllerManager, w.Scheduler, w.Proxy, w.Etcd, w.CoreDNS, w.Pause}
}

// ParseImageList reads `kubeadm config images list` output: one reference per line, each
// component exactly once.
func ParseImageList(out string) (Images, error) {
	var w Images
	slots := map[string]*string{
		"kube-apiserver": &w.APIServer, "kube-controller-manager": &w.ControllerManager,
		"kube-scheduler": &w.Scheduler, "kube-proxy": &w.Proxy, "etcd": &w.Etcd, "coredns": &w.CoreDNS, "pause": &w.Pause,
	}
	for _, line := range strings.Split(out, "\n") {
		ref := strings.TrimSpace(line)
		if ref == "" {
			continue
		}
		r, err := name.NewTag(ref)
		if err != nil {
			return w, fmt.Errorf("kubeadm image %q: %w", ref, err)
		}
		slot, ok := slots[path.Base(r.RepositoryStr())]
		if !ok {
			return w, fmt.Errorf("kubeadm image %q: unknown component", ref)
		}
		if *slot != "" {
			return w, fmt.Errorf("kubeadm lists %s twice (%s, %s)", path.Base(r.RepositoryStr()), *slot, ref)
		}
		*slot = ref
	}
	for c, slot := range slots {
		if *slot == "" {
			return w, fmt.Errorf("kubeadm lists no %s image", c)
		}
	}
	return w, nil
}

var etcdVersionLine = regexp.MustCompile(`(?m)^etcd Version:\s*(\S+)`)

// EtcdImage names the etcd image after the etcd the node holds (`etcd --version` output): the
// tag is "<version>-0" as kubeadm's are. When that is not kubeadm's default, it also returns
// the kubeadm ClusterConfiguration patch that makes kubeadm run it.
func EtcdImage(w Images, versionOutput string) (Images, []string, error) {
	m := etcdVersionLine.FindStringSubmatch(versionOutput)
	if m == nil {
		return w, nil, fmt.Errorf("etcd --version: no \"etcd Version:\" line in %q", versionOutput)
	}
	def, err := name.NewTag(w.Etcd)
	if err != nil {
		return w, nil, err
	}
	tag := m[1] + "-0"
	if def.TagStr() == tag {
		return w, nil, nil
	}
	w.Etcd = def.Context().Tag(tag).String()
	patch := "kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: " + tag + "\n"
	return w, []string{patch}, nil
}

func kubeadmImages(ctx context.Context, kubeadm, version string) (Images, error) {
	out, err := run(ctx, "", kubeadm, "config", "images", "list", "--kubernetes-version", version)
	if err != nil {
		return Images{}, err
	}
	return ParseImageList(out)
}

// component is one control-plane image: its binaries under /usr/local/bin (the commands
// kubeadm's static pod manifests run by name) or an entrypoint, and extra rootfs paths.
type component struct {
	ref        string
	bins       []string // names in Options.Bins, installed as /usr/local/bin/NAME
	entrypoint []string
	user       string
	// extra are rootfs paths (files, symlinks or directories) copied from the node's rootfs
	// with their shared-library closure (kube-proxy's iptables, nft and conntrack).
	extra []string
	// static is a prebuilt static file (pause) put at /NAME.
	static string
}

// kubeProxyTools are what kube-proxy runs (iptables and nftables modes, conntrack clean-up):
// Debian's iptables-nft with its xtables extension modules, nft, and conntrack.
var kubeProxyTools = []string{
	"/usr/sbin/iptables", "/usr/sbin/iptables-save", "/usr/sbin/iptables-restore",
	"/usr/sbin/ip6tables", "/usr/sbin/ip6tables-save", "/usr/sbin/ip6tables-restore",
	"/usr/sbin/iptables-nft", "/usr/sbin/iptables-nft-save", "/usr/sbin/iptables-nft-restore",
	"/usr/sbin/ip6tables-nft", "/usr/sbin/ip6tables-nft-save", "/usr/sbin/ip6tables-nft-restore",
	"/usr/sbin/xtables-nft-multi", "/usr/lib/x86_64-linux-gnu/xtables", "/usr/sbin/nft", "/usr/sbin/conntrack",
	"/etc/alternatives/iptables", "/etc/alternatives/iptables-save", "/etc/alternatives/iptables-restore",
	"/etc/alternatives/ip6tables", "/etc/alternatives/ip6tables-save", "/etc/alternatives/ip6tables-restore",
}

func components(w Images, pause string) []component {
	return []component{
		{ref: w.APIServer, bins: []string{"kube-apiserver"}},
		{ref: w.ControllerManager, bins: []string{"kube-controller-manager"}},
		{ref: w.Scheduler, bins: []string{"kube-scheduler"}},
		{ref: w.Proxy, bins: []string{"kube-proxy"}, extra: kubeProxyTools},
		{ref: w.Etcd, bins: []string{"etcd"}},
		{ref: w.CoreDNS, bins: []string{"coredns"}, entrypoint: []string{"/usr/local/bin/coredns"}},
		{ref: w.Pause, static: pause, entrypoint: []string{"/pause"}, user: "65535:65535"},
	}
}

// writeComponentImages writes one docker-archive tarball per control-plane image into dir: a
// shared layer with the C library closure of every binary (taken from the node's rootfs, so the
// same Debian build), then a layer with the component's own files.
func writeComponentImages(ctx context.Context, o Options, root, dir string, w Images) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pause := filepath.Join(dir, "pause")
	if _, err := run(ctx, "", "gcc", "-Os", "-static", "-o", pause, o.PauseSource); err != nil {
		return nil, fmt.Errorf("missing component: pause: gcc -static %s: %w (apt-get install gcc libc6-dev)", o.PauseSource, err)
	}
	comps := components(w, pause)
	// The shared layer: every library a component binary needs, resolved inside root.
	libs := map[string]bool{}
	for _, c := range comps {
		for _, b := range c.bins {
			if err := elfClosure(root, o.Bins[b], libs); err != nil {
				return nil, fmt.Errorf("%s: %w", b, err)
			}
		}
	}
	baseFiles := []layerFile{{target: "/tmp", dir: true, mode: 0o1777}, {target: "/etc/nsswitch.conf", src: filepath.Join(root, "etc/nsswitch.conf")}}
	for _, l := range sortedKeys(libs) {
		baseFiles = append(baseFiles, rootfsFiles(root, l)...)
	}
	base, err := writeLayer(filepath.Join(dir, "base-layer.tar"), baseFiles)
	if err != nil {
		return nil, err
	}
	var tars []string
	for _, c := range comps {
		var files []layerFile
		for _, b := range c.bins {
			files = append(files, layerFile{target: "/usr/local/bin/" + b, src: o.Bins[b], mode: 0o755})
		}
		if c.static != "" {
			files = append(files, layerFile{target: "/" + filepath.Base(c.static), src: c.static, mode: 0o755})
		}
		extraLibs := map[string]bool{}
		for _, p := range c.extra {
			files = append(files, rootfsFiles(root, p)...)
			_ = filepath.WalkDir(filepath.Join(root, p), func(fp string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					_ = elfClosure(root, fp, extraLibs)
				}
				return nil
			})
		}
		for _, l := range sortedKeys(extraLibs) {
			if !libs[l] {
				files = append(files, rootfsFiles(root, l)...)
			}
		}
		own, err := writeLayer(filepath.Join(dir, sanitize(c.ref)+"-layer.tar"), files)
		if err != nil {
			return nil, err
		}
		layers := []string{own}
		if c.static == "" {
			layers = []string{base, own}
		}
		out := filepath.Join(dir, sanitize(c.ref)+".tar")
		if err := writeImage(out, c.ref, layers, v1.Config{
			Entrypoint: c.entrypoint, User: c.user,
			Env:    []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Labels: map[string]string{"io.eppkit.kind-node.component": c.ref},
		}); err != nil {
			return nil, fmt.Errorf("image %s: %w", c.ref, err)
		}
		tars = append(tars, out)
	}
	return tars, nil
}

func sanitize(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// libDirs are where the dynamic loader of the node's Debian finds libraries.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// elfClosure adds to libs the rootfs paths of the ELF interpreter and every DT_NEEDED library
// of bin, recursively, resolved in root's library directories. A file that is not ELF, or a
// static binary, adds nothing. A library that cannot be found is an error naming it.
func elfClosure(root, bin string, libs map[string]bool) error {
	f, err := elf.Open(bin)
	if err != nil {
		return nil // not ELF: a script or data
	}
	defer f.Close()
	var needed []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp := strings.TrimRight(string(b), "\x00")
				if !libs[interp] {
					libs[interp] = true
				}
			}
		}
	}
	needed, _ = f.ImportedLibraries()
	for _, n := range needed {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(root, d, n)); err == nil {
				found = path.Join(d, n)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("library %s (needed by %s) not in the rootfs", n, bin)
		}
		if libs[found] {
			continue
		}
		libs[found] = true
		real, err := resolveInRoot(root, found)
		if err != nil {
			return err
		}
		if err := elfClosure(root, filepath.Join(root, real), libs); err != nil {
			return err
		}
	}
	return nil
}

// resolveInRoot resolves p (an absolute path inside root) with every symlink on the way,
// intermediate ones included, interpreted inside root (an absolute target means root's /).
func resolveInRoot(root, p string) (string, error) {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for hops := 0; len(parts) > 0; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many symlinks", p)
		}
		t, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(t) {
			cur = "/"
		}
		parts = append(strings.Split(strings.Trim(t, "/"), "/"), parts...)
	}
	return cur, nil
}

// layerFile is one entry of a layer: a file copied from src, a symlink, or a directory.
type layerFile struct {
	target string
	src    string
	link   string
	dir    bool
	mode   fs.FileMode
}

// rootfsFiles are the entries that reproduce p of root in a layer: the path itself and, for a
// symlink, what it points to (recursively), for a directory everything below it.
func rootfsFiles(root, p string) []layerFile {
	var out []layerFile
	seen := map[string]bool{}
	var add func(p string, depth int)
	add = func(p string, depth int) {
		if seen[p] || depth > 40 {
			return
		}
		seen[p] = true
		full := filepath.Join(root, p)
		fi, err := os.Lstat(full)
		if err != nil {
			return
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(full)
			out = append(out, layerFile{target: p, link: t})
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(p), t)
			}
			add(path.Clean(t), depth+1)
		case fi.IsDir():
			_ = filepath.WalkDir(full, func(fp string, d fs.DirEntry, err error) error {
				if err != nil || fp == full {
					return nil
				}
				rel, _ := filepath.Rel(root, fp)
				add("/"+filepath.ToSlash(rel), depth+1)
				return nil
			})
		default:
			out = append(out, layerFile{target: p, src: full, mode: fi.Mode().Perm()})
		}
	}
	add(p, 0)
	return out
}

// writeLayer writes files as an uncompressed layer tarball (parents created, owner root).
func writeLayer(out string, files []layerFile) (string, error) {
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	dirs := map[string]bool{}
	mkdirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			dirs[parents[i]] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(parents[i], "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	written := map[string]bool{}
	for _, lf := range files {
		if written[lf.target] {
			continue
		}
		written[lf.target] = true
		if err := mkdirs(lf.target); err != nil {
			return "", err
		}
		name := strings.TrimPrefix(lf.target, "/")
		switch {
		case lf.dir:
			dirs[lf.target] = true
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(lf.mode)})
		case lf.link != "":
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: lf.link, Mode: 0o777})
		default:
			err = copyInto(tw, name, lf.src, lf.mode)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", lf.target, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return out, f.Close()
}

func copyInto(tw *tar.Writer, name, src string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = fi.Mode().Perm()
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: int64(mode)}); err != nil {
		return err
	}
	_, err = io.Copy(tw, in)
	return err
}

// writeImage writes a docker-archive tarball of ref built from the layer tarballs (bottom
// first) with cfg, for linux/amd64.
func writeImage(out, ref string, layers []string, cfg v1.Config) error {
	img, err := buildImage(layers, cfg)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.MultiRefWriteToFile(out, map[name.Reference]v1.Image{tag: img})
}

func buildImage(layers []string, cfg v1.Config) (v1.Image, error) {
	var ls []v1.Layer
	for _, p := range layers {
		l, err := tarball.LayerFromFile(p, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// writeNodeImage tars the node rootfs into one layer and streams the image into `<engine>
// load`; it returns the image ID the engine reports.
func writeNodeImage(ctx context.Context, o Options, root, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	layer := filepath.Join(dir, "rootfs.tar")
	// GNU tar keeps what a rootfs needs (owners, setuid bits, hard links, capabilities).
	if _, err := run(ctx, "", "tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
		"-C", root, "-cf", layer, "."); err != nil {
		return "", err
	}
	labels := map[string]string{}
	for k, v := range o.Labels {
		labels[k] = v
	}
	img, err := buildImage([]string{layer}, v1.Config{
		Entrypoint: []string{"/usr/local/bin/entrypoint", "/sbin/init"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=docker"},
		StopSignal: "SIGRTMIN+3",
		Labels:     labels,
	})
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(o.Tag)
	if err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Write(tag, img, pw)) }()
	cmd := exec.CommandContext(ctx, o.Engine, "load")
	cmd.Stdin = pr
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Run(); err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("%s load: %w: %s", o.Engine, err, strings.TrimSpace(outb.String()))
	}
	id, err := run(ctx, "", o.Engine, "image", "inspect", "--format", "{{.Id}}", o.Tag)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(id), nil
}
