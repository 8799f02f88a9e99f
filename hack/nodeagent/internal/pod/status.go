package pod

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// status computes the pod's status from what the worker knows, keeping the transition time
// of every condition whose status did not change.
func (w *worker) status(pod *corev1.Pod) corev1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := corev1.PodStatus{
		QOSClass:  pod.Status.QOSClass,
		StartTime: &w.started,
	}
	if old := pod.Status.StartTime; old != nil {
		st.StartTime = old
	}
	hostIP := w.c.cfg.Network.Gateway().String()
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	if w.sb != nil {
		ip := w.sb.IP.String()
		st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	st.InitContainerStatuses = w.containerStatuses(pod.Spec.InitContainers, w.inits)
	st.ContainerStatuses = w.containerStatuses(pod.Spec.Containers, w.containers)
	st.Phase = w.phase(pod, st.ContainerStatuses)
	ready := len(st.ContainerStatuses) > 0
	for _, cs := range st.ContainerStatuses {
		ready = ready && cs.Ready
	}
	st.Conditions = conditions(pod.Status.Conditions, map[corev1.PodConditionType]bool{
		corev1.PodScheduled:              true,
		corev1.PodReadyToStartContainers: w.sb != nil,
		corev1.PodInitialized:            w.initialized,
		corev1.ContainersReady:           ready,
		corev1.PodReady:                  ready,
	})
	return st
}

func (w *worker) phase(pod *corev1.Pod, statuses []corev1.ContainerStatus) corev1.PodPhase {
	if w.initFailed {
		return corev1.PodFailed
	}
	if !w.initialized {
		return corev1.PodPending
	}
	running, failed, finished := false, false, 0
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running = true
		case cs.State.Terminated != nil && !restarts(pod.Spec.RestartPolicy, int(cs.State.Terminated.ExitCode)):
			finished++
			failed = failed || cs.State.Terminated.ExitCode != 0
		case cs.ContainerID == "":
			return corev1.PodPending // never started yet
		}
	}
	switch {
	case finished == len(statuses) && failed:
		return corev1.PodFailed
	case finished == len(statuses):
		return corev1.PodSucceeded
	case running || finished > 0:
		return corev1.PodRunning
	}
	return corev1.PodRunning // restarting after having run
}

// containerStatuses reports every container of specs; those not created yet wait with the
// worker's current setup reason.
func (w *worker) containerStatuses(specs []corev1.Container, running []*container) []corev1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(specs))
	for i := range specs {
		cs := corev1.ContainerStatus{Name: specs[i].Name, Image: specs[i].Image}
		if i < len(running) {
			running[i].fill(&cs)
		} else {
			reason := w.waitReason
			if reason == "" {
				reason = "PodInitializing"
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: w.waitMessage}
		}
		out[i] = cs
	}
	return out
}

func (c *container) fill(cs *corev1.ContainerStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs.State, cs.LastTerminationState = c.state, c.last
	cs.RestartCount, cs.Ready = c.restarts, c.ready
	cs.Started = ptr.To(c.started)
	if c.id != "" {
		cs.ContainerID = c.id
	}
	if c.imageID != "" {
		cs.ImageID = c.imageID
	}
}

// conditions returns the pod conditions with want's statuses, in a fixed order.
func conditions(old []corev1.PodCondition, want map[corev1.PodConditionType]bool) []corev1.PodCondition {
	order := []corev1.PodConditionType{
		corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady,
		corev1.ContainersReady, corev1.PodScheduled,
	}
	now := now()
	out := make([]corev1.PodCondition, 0, len(order))
	for _, t := range order {
		status := corev1.ConditionFalse
		if want[t] {
			status = corev1.ConditionTrue
		}
		c := corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now}
		for _, o := range old {
			if o.Type == t && o.Status == status {
				c.LastTransitionTime = o.LastTransitionTime
				c.LastProbeTime = o.LastProbeTime
			}
		}
		out = append(out, c)
	}
	return out
}

// now is the current time at the API's precision, so a status read back compares equal to the
// one written and no write repeats itself.
func now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }
