package kubelet

import "strings"

// expand replaces $(NAME) in s with vars[NAME] the way Kubernetes expands container command,
// args and env values (k8s.io/kubernetes third_party/forked/golang/expansion): "$$" is an escaped
// "$", a reference to an undefined name is left as written, and an unterminated "$(" is literal.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// rewritePaths replaces every mount path of mounts (container path → local path) found in s at a
// path boundary (followed by '/' or the end of s) with its local path, longest mount path first.
func rewritePaths(s string, mounts []mountRewrite) string {
	for _, m := range mounts {
		if m.from == "" || !strings.Contains(s, m.from) {
			continue
		}
		var b strings.Builder
		rest := s
		for {
			i := strings.Index(rest, m.from)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			after := i + len(m.from)
			if after == len(rest) || rest[after] == '/' {
				b.WriteString(rest[:i])
				b.WriteString(m.to)
			} else {
				b.WriteString(rest[:after])
			}
			rest = rest[after:]
		}
		s = b.String()
	}
	return s
}

// mountRewrite maps a container mount path to its materialised local path.
type mountRewrite struct{ from, to string }
