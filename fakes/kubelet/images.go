package kubelet

import (
	"fmt"
	"sort"
	"strings"
)

// EppkitImage is the image name (last path component, any tag) that maps to the eppkit binary in
// the local provider's default image map.
const EppkitImage = "eppkit"

// imageName returns an image reference without its digest and tag ("ghcr.io/eppkit/eppkit:v1"
// → "ghcr.io/eppkit/eppkit") and its last path component ("eppkit").
func imageName(ref string) (repo, last string) {
	repo = ref
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	// A tag is a ':' after the last '/' (a registry host may carry a port: "host:5000/x").
	if i := strings.LastIndex(repo, ":"); i >= 0 && i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	last = repo
	if i := strings.LastIndex(last, "/"); i >= 0 {
		last = last[i+1:]
	}
	return repo, last
}

// MatchImage finds the local binary for an image reference in images (image → binary path).
// Keys are tried in order: the exact reference ("eppkit:dev"), the reference without tag or
// digest ("ghcr.io/eppkit/eppkit"), and its last path component ("eppkit"). So the key "eppkit"
// maps every image named eppkit whatever its registry and tag, while a key with a tag maps only
// that tag. ok is false when nothing matches.
func MatchImage(images map[string]string, ref string) (path string, ok bool) {
	if p, ok := images[ref]; ok {
		return p, true
	}
	repo, last := imageName(ref)
	if p, ok := images[repo]; ok {
		return p, true
	}
	if p, ok := images[last]; ok {
		return p, true
	}
	return "", false
}

// ParseImageMap parses "image=path" entries (the --image flag of `eppkit cluster kubelet`).
// Errors name the entry.
func ParseImageMap(entries []string) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("image map entry %q: want image=/path/to/binary", e)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("image map entry %q: image %s given twice", e, k)
		}
		out[k] = v
	}
	return out, nil
}

func imageKeys(images map[string]string) []string {
	keys := make([]string, 0, len(images))
	for k := range images {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
