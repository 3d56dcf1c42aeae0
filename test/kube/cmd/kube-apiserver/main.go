// Command kube-apiserver is the upstream API server, built from k8s.io/kubernetes for servegate's tests.
// scripts/build-kube.mjs stamps the version it reports (k8s.io/component-base/version) at link time.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
