package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const installNamespace = "coxswain-system"

// waitFor polls check every 250 ms until it reports done, printing its status line whenever it
// changes; after timeout it fails with the last status.
func (c *cluster) waitFor(ctx context.Context, what string, check func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	defer cancel()
	last := ""
	for {
		done, status, err := check(ctx)
		if err != nil {
			status = err.Error()
		}
		if done {
			return nil
		}
		if status != last && status != "" {
			progress("%s: %s", what, status)
			last = status
		}
		select {
		case <-ctx.Done():
			c.dumpPods()
			return fmt.Errorf("%s: not within %s: %s (logs in %s)", what, c.o.timeout, last, c.logs)
		case <-c.agentDone:
			return fmt.Errorf("%s: the node agent exited: %w (log %s)", what, c.agentErr, filepath.Join(c.logs, "nodeagent.log"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *cluster) waitNode(ctx context.Context) error {
	return c.waitFor(ctx, "node", func(ctx context.Context) (bool, string, error) {
		n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "agent started, Node not registered yet", nil
		}
		if err != nil {
			return false, "", err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, "Ready=" + string(cond.Status), nil
			}
		}
		return false, "registered, not Ready yet", nil
	})
}

// waitCoxswain waits until the operator Deployment is Available and, with --wait=pool, the
// shared proxy pool's replicas are all Ready.
func (c *cluster) waitCoxswain(ctx context.Context) error {
	if err := c.waitFor(ctx, "operator", c.deploymentCheck("coxswain-controller", true)); err != nil {
		return err
	}
	progress("operator Available (deployment %s/coxswain-controller)", installNamespace)
	if c.o.wait != "pool" {
		return nil
	}
	if err := c.waitFor(ctx, "shared proxy pool", c.deploymentCheck("coxswain-shared-proxy", false)); err != nil {
		return fmt.Errorf("%w; the proxies reach coxswain-discovery.%s.svc:50051 through the cluster DNS and Service proxy of the node agent", err, installNamespace)
	}
	progress("shared proxy pool Ready (deployment %s/coxswain-shared-proxy)", installNamespace)
	return nil
}

// deploymentCheck reports a Deployment done when it is Available (available) or when all its
// replicas are ready; the status line lists its pods' states.
func (c *cluster) deploymentCheck(name string, available bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		d, err := c.client.AppsV1().Deployments(installNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		done := d.Status.ReadyReplicas >= want && d.Status.ObservedGeneration >= d.Generation
		if available {
			done = deploymentAvailable(d)
		}
		pods, err := c.client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector),
		})
		if err != nil {
			return done, "", err
		}
		return done, fmt.Sprintf("%d/%d ready; %s", d.Status.ReadyReplicas, want, podStates(pods.Items)), nil
	}
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podStates is a short, stable summary: each pod's phase, or the reason its container waits,
// and whether it is ready.
func podStates(pods []corev1.Pod) string {
	var states []string
	for i := range pods {
		p := &pods[i]
		state := string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
				state = cs.State.Waiting.Reason
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				state += " ready"
			}
		}
		states = append(states, state)
	}
	slices.Sort(states)
	if len(states) == 0 {
		return "no pods yet"
	}
	return "pods: " + strings.Join(states, ", ")
}

// dumpPods prints every pod of the cluster, to say where a wait got stuck.
func (c *cluster) dumpPods() {
	cmd := exec.Command(filepath.Join(c.o.assets, "kubectl"), "--kubeconfig="+c.kubeconfig, //nolint:gosec,noctx // our kubectl, a short listing
		"get", "pods", "-A", "-o", "wide")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	_ = cmd.Run()
}
