// Command coredns-stub stands in for the CoreDNS image of the conformance suite's base
// manifests on the local cluster. Those manifests declare no probe, so running is all it takes
// for the pod to be Ready; only the UDPRoute tests send it queries, and the GATEWAY-HTTP profile
// has none. It answers nothing: it checks its arguments, says what it is, and waits for
// SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	fs := flag.NewFlagSet("coredns-stub", flag.ContinueOnError)
	conf := fs.String("conf", "Corefile", "the Corefile CoreDNS would read; it must exist")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if _, err := os.Stat(*conf); err != nil {
		fmt.Fprintf(os.Stderr, "coredns-stub: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintf(os.Stderr, "coredns-stub: standing in for CoreDNS (%s), answering no queries\n", *conf)
	<-ctx.Done()
}
