// Command pause is the local cluster's pod sandbox image: it holds a pod's
// namespaces open and exits on SIGTERM or SIGINT. Built static
// (CGO_ENABLED=0) by tests/cluster/up.sh, so the image needs nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
