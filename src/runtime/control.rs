//! Control of a running run from outside: the [`Controller`] (abort, approvals, steering,
//! the partial message) and the receiving side its run takes.

use super::*;

/// The partial-message snapshot of a run (R-STR-2), shared between the run's driver, which
/// refreshes it after every event the machines handle (every delta included) and before it
/// performs that event's effects, and any number of readers. It holds what
/// [`Run::partial`] returns: the message of the current step as assembled so far (the
/// committed message once the step committed, while its tools run), `None` between steps and
/// after the run. Cloning shares the snapshot; reading clones an `Arc`, not the message.
#[derive(Clone, Debug, Default)]
pub(crate) struct PartialMessage(Arc<RwLock<Option<Arc<AssistantMessage>>>>);

impl PartialMessage {
    /// The message as it stands, if a step is in progress.
    pub(crate) fn get(&self) -> Option<Arc<AssistantMessage>> {
        self.0.read().ok().and_then(|m| m.clone())
    }

    /// Replaces the snapshot (the driver's side).
    pub(crate) fn set(&self, message: Option<AssistantMessage>) {
        if let Ok(mut slot) = self.0.write() {
            *slot = message.map(Arc::new);
        }
    }

    /// Brings the snapshot up to `run`'s partial message (the driver's side). `mark` is the
    /// mark of the snapshot held: an unchanged message costs nothing, a message that grew is
    /// extended in place with what arrived since (copied only while a reader still holds the
    /// previous snapshot), anything else is rebuilt. Refreshing after every event thus costs
    /// time proportional to what the event added, not to the message's size.
    pub(crate) fn refresh(&self, run: &Run, mark: &mut Option<PartialMark>) {
        let now = run.partial_mark();
        if now == *mark {
            return;
        }
        let Ok(mut slot) = self.0.write() else {
            return;
        };
        match (slot.as_mut(), now, mark.as_ref()) {
            (Some(held), Some(n), Some(m)) if n.same_source(m) => {
                run.update_partial(Arc::make_mut(held));
            }
            _ => *slot = run.partial().map(Arc::new),
        }
        *mark = now;
    }
}

/// Sends control events (abort, approvals) into a running run, and reads its partial message.
///
/// Make one with [`Controller::new`] and hand it to [`Agent::run_with`] (or `run_configured`,
/// `resume_with`). Events sent before the run starts wait for it. Given to another run, the
/// controller follows that run (the newest it was given); a clone shares it.
#[derive(Clone, Debug)]
pub struct Controller {
    channel: Arc<std::sync::Mutex<ControlChannel>>,
    partial: PartialMessage,
    steering: Arc<SteeringCounts>,
}

/// A controller's channel: the receiver waits here until a run takes it.
#[derive(Debug)]
struct ControlChannel {
    tx: mpsc::UnboundedSender<Event>,
    rx: Option<mpsc::UnboundedReceiver<Event>>,
}

impl Default for Controller {
    fn default() -> Self {
        Self::sharing(PartialMessage::default())
    }
}

/// What a controlled run's machine reports of its steering queue (R-CTL-2): the queue itself is
/// the machine's ([`Run::steering`](agentloop_core::Run::steering)); a controller reads how many
/// messages it holds and how many `steer` events reached it, so a session can bound the queue
/// without keeping a copy of it.
#[derive(Debug, Default)]
pub(crate) struct SteeringCounts {
    /// `steer` events the run has fed to its machine.
    pub(super) received: std::sync::atomic::AtomicU64,
    /// Steering messages the machine holds, not yet applied.
    pub(super) pending: std::sync::atomic::AtomicUsize,
}

/// The receiving side of a [`Controller`], taken by the run it is given to.
#[derive(Debug)]
pub(crate) struct ControlReceiver {
    pub(super) rx: mpsc::UnboundedReceiver<Event>,
    pub(super) partial: PartialMessage,
    pub(super) steering: Arc<SteeringCounts>,
}

/// A new controller and its receiver, whose run publishes its partial message into `partial`.
pub(crate) fn control_sharing(partial: PartialMessage) -> (Controller, ControlReceiver) {
    let controller = Controller::sharing(partial);
    let receiver = controller.receiver();
    (controller, receiver)
}

impl Controller {
    /// A controller for a run not started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A controller whose run publishes its partial message into `partial`.
    fn sharing(partial: PartialMessage) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Controller {
            channel: Arc::new(std::sync::Mutex::new(ControlChannel { tx, rx: Some(rx) })),
            partial,
            steering: Arc::new(SteeringCounts::default()),
        }
    }

    /// The receiver for a run: the waiting one, or (the first one taken) a new channel the
    /// controller now sends into.
    pub(crate) fn receiver(&self) -> ControlReceiver {
        let rx = {
            let mut channel = self.channel.lock().unwrap_or_else(|e| e.into_inner());
            match channel.rx.take() {
                Some(rx) => rx,
                None => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    channel.tx = tx;
                    rx
                }
            }
        };
        ControlReceiver {
            rx,
            partial: self.partial.clone(),
            steering: self.steering.clone(),
        }
    }

    /// A snapshot of the message being streamed by the controlled run (R-STR-2): the message
    /// of the current step as assembled so far (the committed message once the step
    /// committed, while its tools run). `None` before the run starts a step, between steps and
    /// after it. Reading clones an `Arc`, not the message; another observer clones the
    /// controller.
    pub fn partial(&self) -> Option<Arc<AssistantMessage>> {
        self.partial.get()
    }

    /// Steering messages the run's machine holds, not yet applied (R-CTL-2).
    pub fn steering_pending(&self) -> usize {
        self.steering
            .pending
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `steer` events the run has fed to its machine (R-CTL-2).
    pub fn steering_received(&self) -> u64 {
        self.steering
            .received
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Aborts the run (R-CTL-3). Returns false if the run is gone.
    pub fn abort(&self, reason: impl Into<String>) -> bool {
        self.abort_with(reason, KillPolicy::default())
    }

    /// Aborts the run with a kill policy for running tools (R-CTL-3).
    pub fn abort_with(&self, reason: impl Into<String>, kill: KillPolicy) -> bool {
        self.send(Event::Abort {
            reason: reason.into(),
            kill,
        })
    }

    /// Steers the run (R-CTL-2): `text` joins the conversation at the next step boundary, as
    /// a user message. Returns false if the run is gone.
    pub fn steer(&self, text: impl Into<String>) -> bool {
        self.send(Event::Steer { text: text.into() })
    }

    /// Uses model `model` from the run's next step on (R-CTL-5); the same model again is no
    /// change. Returns false if the run is gone.
    pub fn switch_model(&self, model: impl Into<String>) -> bool {
        self.send(Event::SwitchModel {
            model: model.into(),
        })
    }

    /// Sends any machine input into the run (a session's subtasks and tool sets; the
    /// controller's own commands). Returns false if the run is gone.
    pub(crate) fn send(&self, event: Event) -> bool {
        let channel = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        channel.tx.send(event).is_ok()
    }

    /// Answers an approval request (R-CTL-4).
    pub fn decide(&self, tool_call_id: impl Into<String>, decision: ApprovalDecision) -> bool {
        self.send(Event::Approval {
            tool_call_id: tool_call_id.into(),
            decision,
        })
    }
}
