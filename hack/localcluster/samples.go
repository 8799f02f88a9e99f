package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// sample is a Gateway of config/samples/local and the host name of its HTTPRoute.
type sample struct {
	gateway types.NamespacedName
	host    string
	what    string
}

var sampleGateways = []sample{
	{types.NamespacedName{Namespace: "demo", Name: "shared"}, "shared.example", "shared pool"},
	{types.NamespacedName{Namespace: "demo", Name: "dedicated"}, "dedicated.example", "dedicated proxy"},
}

// gatewayTimeout bounds the wait for the samples; the cluster stays up after it either way.
const gatewayTimeout = 5 * time.Minute

// samples runs inside the cluster's namespaces (KUBECONFIG set by hack/cluster.sh): it applies
// the sample directory, waits until each sample Gateway is Programmed with an address and
// answers 200 through it, prints how to send a request, and waits for Ctrl-C.
func samples(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: localcluster --in-cluster SAMPLES_DIR")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	apply := exec.CommandContext(ctx, "kubectl", "apply", "--server-side", "-f", args[0])
	if out, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply -f %s: %w: %s", args[0], err, out)
	}
	say("applied %s: the echo backend, Gateways demo/shared and demo/dedicated with an HTTPRoute each", args[0])
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := gwapiv1.Install(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	var commands []string
	waitCtx, cancel := context.WithTimeout(ctx, gatewayTimeout)
	defer cancel()
	for _, s := range sampleGateways {
		addr, err := waitGateway(waitCtx, c, s)
		if err == nil {
			err = waitOK(waitCtx, s, addr)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			say("%s: %v; the cluster stays up to look at it (hack/cluster.sh exec -- kubectl get pods -A)", s.gateway, err)
			continue
		}
		commands = append(commands, fmt.Sprintf("  hack/cluster.sh exec -- curl -sS -H 'Host: %s' http://%s/    # %s, Gateway %s", s.host, addr, s.what, s.gateway))
	}
	if len(commands) > 0 {
		say("send a request through each Gateway, from another terminal:\n%s", strings.Join(commands, "\n"))
	}
	say("Ctrl-C stops the cluster")
	<-ctx.Done()
	return nil
}

// waitGateway waits until the Gateway is Programmed and has an address, printing each change of
// its Programmed condition.
func waitGateway(ctx context.Context, c client.Client, s sample) (string, error) {
	last := ""
	for {
		var gw gwapiv1.Gateway
		status := ""
		if err := c.Get(ctx, s.gateway, &gw); err != nil {
			status = err.Error()
		} else {
			cond := programmed(&gw)
			addr := ""
			if len(gw.Status.Addresses) > 0 {
				addr = gw.Status.Addresses[0].Value
			}
			if cond != nil && cond.Status == metav1.ConditionTrue && addr != "" {
				say("Gateway %s Programmed, address %s", s.gateway, addr)
				return addr, nil
			}
			status = "Programmed: not yet"
			if cond != nil {
				status = fmt.Sprintf("Programmed=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		if status != last {
			say("Gateway %s: %s", s.gateway, status)
			last = status
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("not Programmed with an address: %s", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func programmed(gw *gwapiv1.Gateway) *metav1.Condition {
	for i := range gw.Status.Conditions {
		if gw.Status.Conditions[i].Type == string(gwapiv1.GatewayConditionProgrammed) {
			return &gw.Status.Conditions[i]
		}
	}
	return nil
}

// waitOK sends GET / with the route's host name to the Gateway's address until it answers 200.
func waitOK(ctx context.Context, s sample, addr string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	last := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", http.NoBody)
		if err != nil {
			return err
		}
		req.Host = s.host
		resp, err := hc.Do(req)
		status := ""
		if err != nil {
			status = err.Error()
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				say("first 200 through Gateway %s: %s", s.gateway, strings.TrimSpace(string(body)))
				return nil
			}
			status = resp.Status
		}
		if status != last {
			say("Gateway %s, GET http://%s/ (Host %s): %s", s.gateway, addr, s.host, status)
			last = status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no 200 from http://%s/: %s", addr, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// say prints a progress line with the seconds since hack/cluster.sh started.
func say(format string, args ...any) {
	start := time.Now()
	if s, err := strconv.ParseFloat(os.Getenv("COXSWAIN_CLUSTER_START"), 64); err == nil {
		start = time.Unix(0, int64(s*1e9))
	}
	fmt.Fprintf(os.Stderr, "localcluster: [%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}
