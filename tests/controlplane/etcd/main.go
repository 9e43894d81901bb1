// The etcd server binary, as etcd's own main package builds it: the
// go.etcd.io/etcd/v3 module that holds that main is not what
// k8s.io/kubernetes depends on, go.etcd.io/etcd/server/v3 is, so this calls
// the same entry point from the version already in the module graph.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
