package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/test/e2e"
)

// The objects of the Programmed test: a dedicated Gateway of its own, whose one listener's
// hostname every round changes, and a route for every name under routeDomain.
const (
	gatewayP    = "programmed"
	routeDomain = "programmed.example.com"
	// programmedRounds is how many changes are waited for and then requested at once.
	programmedRounds = 12
	// unjudgedNote is what the controller adds to a Gateway's Programmed message when none of
	// its proxies streams from the replica that writes status: Programmed then rests on
	// readiness and says so, and does not claim that the proxies applied the generation.
	unjudgedNote = rebuild.NoStreamsHere
	// judgedAttempts bounds the proxy pods started until one streams from the leader.
	judgedAttempts = 8
)

// programmedMeansServed proves that `kubectl wait --for=condition=Programmed` returns only
// once traffic follows the change: each round changes the hostname of a dedicated Gateway's
// listener (a new generation), checks the new name is not served yet, runs kubectl wait, and at
// once, with no pause and no retry, requests the new name, which must reach the backend, and
// the old one, which must get 404. Rounds repeat so that a status written before the proxy
// applied the change has chances to show.

// programmedHost is the listener hostname of round i.
func programmedHost(i int) string { return "r" + strconv.Itoa(i) + "." + routeDomain }

func (s *suite) programmedMeansServed(t *testing.T) {
	ctx := t.Context()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl: %v (hack/cluster.sh run puts bin/k8s first on PATH)", err)
	}
	// The suite's one-minute SVIDs renew every half minute, and each renewal reconnects the
	// proxy's stream, to either controller replica: with a lifetime of an hour, the proxy
	// started below keeps the stream it opened for the whole test.
	if err := s.setSVIDTTL(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := s.setSVIDTTL(ctx, wellknown.MinSVIDTTL); err != nil {
			t.Errorf("restore the SVID lifetime: %v", err)
		}
	})
	host, err := s.ensureProgrammedGateway(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.waitServingHost(ctx, host, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.proxyStreamsFromLeader(ctx, t, host); err != nil {
		t.Fatal(err)
	}
	first, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(host, "."+routeDomain), "r"))
	var waits []time.Duration
	for i := first + 1; i <= first+programmedRounds; i++ {
		waited := s.programmedRound(ctx, t, kubectl, addr, programmedHost(i-1), programmedHost(i))
		if t.Failed() {
			return
		}
		waits = append(waits, waited)
	}
	t.Logf("%d rounds: kubectl wait returned %v after each change, and every request right after it was served as changed",
		len(waits), waits)
}

// ensureProgrammedGateway creates the test's Gateway, with the hostname of round 0, and its
// route, unless they exist, and returns the listener's hostname.
func (s *suite) ensureProgrammedGateway(ctx context.Context) (string, error) {
	gw := dedicatedGateway(gatewayP)
	gw.Spec.Listeners[0].Hostname = ptr.To(gwapiv1.Hostname(programmedHost(0)))
	if err := s.ensure(ctx, gw); err != nil {
		return "", err
	}
	rt := e2e.HTTPRoute(e2e.Route{
		Namespace: namespace, Name: gatewayP, Gateway: gatewayP, Hostname: "*." + routeDomain, PathPrefix: "/", Service: echoName,
	})
	if err := s.ensure(ctx, rt); err != nil {
		return "", err
	}
	if err := s.client.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		return "", err
	}
	if h := gw.Spec.Listeners[0].Hostname; h != nil && strings.HasSuffix(string(*h), "."+routeDomain) {
		return string(*h), nil
	}
	return "", fmt.Errorf("gateway %s/%s listener hostname %v is not under %s", namespace, gatewayP, gw.Spec.Listeners[0].Hostname, routeDomain)
}

// waitServingHost waits until the test's Gateway answers host from the echo backend, and
// returns its address.
func (s *suite) waitServingHost(ctx context.Context, host string, timeout time.Duration) (string, error) {
	return s.waitGatewayServing(ctx, gatewayP, host, timeout)
}

// proxyStreamsFromLeader makes sure that the Gateway's Programmed condition is judged from its
// proxy's acknowledgements: with two controller replicas the proxy's stream goes to either,
// and only the leader writes status. While the condition says its proxy streams elsewhere, the
// proxy pod is deleted and its Deployment's next pod connects again.
func (s *suite) proxyStreamsFromLeader(ctx context.Context, t *testing.T, host string) error {
	for attempt := 1; attempt <= judgedAttempts; attempt++ {
		var c *programmedCondition
		err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
			var err error
			c, err = s.programmedCondition(ctx)
			if err != nil {
				return err
			}
			if !c.current() {
				return fmt.Errorf("gateway %s/%s: %s, want Programmed True at generation %d", namespace, gatewayP, c, c.generation)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !strings.Contains(c.Message, unjudgedNote) {
			t.Logf("The proxy of gateway %s streams from the leader (attempt %d): %s", gatewayP, attempt, c)
			return nil
		}
		pod, err := s.proxyPod(ctx, gatewayP)
		if err != nil {
			return err
		}
		t.Logf("Attempt %d: pod %s streams from a follower (%q): deleting it", attempt, pod.Name, c.Message)
		if err := s.client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
			p, err := s.proxyPod(ctx, gatewayP)
			if err != nil {
				return err
			}
			if p.Name == pod.Name || podReady(p) != corev1.ConditionTrue {
				return fmt.Errorf("pod %s Ready=%s, want a new Ready pod", p.Name, podReady(p))
			}
			return nil
		}); err != nil {
			return err
		}
		if _, err := s.waitServingHost(ctx, host, time.Minute); err != nil {
			return err
		}
	}
	return fmt.Errorf("none of %d proxy pods of gateway %s/%s streamed from the leader", judgedAttempts, namespace, gatewayP)
}

// programmedRound changes the listener's hostname from prev to next, waits with kubectl, then
// requests both names at once; it returns how long kubectl waited.
func (s *suite) programmedRound(ctx context.Context, t *testing.T, kubectl, addr, prev, next string) time.Duration {
	t.Helper()
	c := e2e.NewClient(addr, true)
	if resp, err := c.Get(ctx, next, "/before"); err != nil || resp.Code != http.StatusNotFound {
		t.Fatalf("before the change, GET %s: %d %q (%v), want 404: the request must need the change", next, resp.Code, resp.Body, err)
	}
	gen, err := s.setListenerHostname(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	out, err := exec.CommandContext(ctx, kubectl, "wait", "--for=condition=Programmed", "--timeout=90s",
		"-n", namespace, "gateways.gateway.networking.k8s.io/"+gatewayP).CombinedOutput()
	waited := time.Since(changed)
	if err != nil {
		t.Fatalf("kubectl wait after generation %d: %v: %s", gen, err, out)
	}
	// At once: no pause, no retry.
	nextResp, nextErr := c.Get(ctx, next, "/after")
	prevResp, prevErr := c.Get(ctx, prev, "/after")

	cond, err := s.programmedCondition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	judged := ""
	if strings.Contains(cond.Message, unjudgedNote) {
		judged = "; the condition was not judged from the proxy's ACKs (its stream moved to a follower), so it did not claim this"
	}
	if nextErr != nil {
		t.Errorf("generation %d (%s): kubectl wait returned after %s, then GET %s failed: %v%s", gen, cond, waited, next, nextErr, judged)
	} else if err := checkEcho(next, "/after")(nextResp); err != nil {
		t.Errorf("generation %d (%s): kubectl wait returned after %s, then GET %s: %v%s", gen, cond, waited, next, err, judged)
	}
	if prevErr != nil || prevResp.Code != http.StatusNotFound {
		t.Errorf("generation %d: kubectl wait returned after %s, then GET %s (the hostname before): %d %q (%v), want 404%s",
			gen, waited, prev, prevResp.Code, prevResp.Body, prevErr, judged)
	}
	if cond.ObservedGeneration < gen || cond.Status != "True" {
		t.Errorf("after kubectl wait: %s, want Programmed True at generation %d or later", cond, gen)
	}
	if judged != "" && !t.Failed() {
		t.Errorf("generation %d: %s%s: the round proves nothing", gen, cond, judged)
	}
	t.Logf("Generation %d (%s): kubectl wait returned %s after the change; %s then served, %s 404", gen, next, waited.Round(time.Millisecond), next, prev)
	return waited.Round(time.Millisecond)
}

// setListenerHostname sets the hostname of the test Gateway's listener and returns the
// Gateway's new generation.
func (s *suite) setListenerHostname(ctx context.Context, hostname string) (int64, error) {
	var gw gwapiv1.Gateway
	err := e2e.Poll(ctx, 10*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: gatewayP}, &gw); err != nil {
			return err
		}
		gw.Spec.Listeners[0].Hostname = ptr.To(gwapiv1.Hostname(hostname))
		if err := s.client.Update(ctx, &gw); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("%w: %w", e2e.ErrGiveUp, err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set the hostname of gateway %s/%s to %s: %w", namespace, gatewayP, hostname, err)
	}
	return gw.Generation, nil
}

// programmedCondition is the test Gateway's Programmed condition with the Gateway's generation.
type programmedCondition struct {
	Status             string
	Reason, Message    string
	ObservedGeneration int64
	generation         int64
}

func (c *programmedCondition) current() bool {
	return c.Status == "True" && c.ObservedGeneration == c.generation
}

func (c *programmedCondition) String() string {
	return fmt.Sprintf("Programmed=%s %s at generation %d of %d: %q", c.Status, c.Reason, c.ObservedGeneration, c.generation, c.Message)
}

func (s *suite) programmedCondition(ctx context.Context) (*programmedCondition, error) {
	var gw gwapiv1.Gateway
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: gatewayP}, &gw); err != nil {
		return nil, err
	}
	c := condition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
	if c == nil {
		return nil, fmt.Errorf("gateway %s/%s has no Programmed condition: %s", namespace, gatewayP, conditions(gw.Status.Conditions))
	}
	return &programmedCondition{
		Status: string(c.Status), Reason: c.Reason, Message: c.Message,
		ObservedGeneration: c.ObservedGeneration, generation: gw.Generation,
	}, nil
}
