// Command etcd is etcd v3.6.11's server built from the go.etcd.io/etcd/server/v3 module, for the
// envtest-style control plane of eppkit (conformance/apiserver). It is the same entry point as the
// upstream etcd binary (go.etcd.io/etcd/v3 main.go calls etcdmain.Main with os.Args).
// It lives in its own module because k8s.io/kubernetes v1.37.2 requires the v3.7 etcd client
// libraries, and minimal version selection would otherwise lift the server to v3.7.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
