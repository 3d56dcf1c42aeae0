// Command kubectl is the upstream kubectl (k8s.io/kubectl), built at the API server's version for servegate's tests:
// Debian's kubernetes-client is 1.20, far outside kubectl's supported skew.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
