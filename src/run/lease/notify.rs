//! What the other nodes on the database tell this one (PostgreSQL `LISTEN/NOTIFY`): a run they
//! committed to changed — so clients following it here read its new frames —, an operator
//! cancelled, on their node, a run this node drives, or a capability was registered or
//! unregistered through them.
//!
//! The event log is the truth; a notification only says when to read it. Every commit of a leased
//! run notifies in its transaction ([`CHANGED`]: the run's id and the commit's time),
//! and this node's listener wakes the run's local followers with [`BusMessage::Changed`]. A lost
//! notification or a dropped connection only delays a frame: every `cluster.poll_millis` the
//! followed runs driven elsewhere are woken anyway, and after the connection is back all of them
//! at once.
//!
//! The stored capability registrations are the truth in the same way: every write or delete of
//! one notifies in its transaction ([`REGISTRATIONS`](crate::capability::REGISTRATIONS), the registry's channel), and the listener
//! asks the registry to read them again ([`crate::capability::Registry::reread`]) — and so it does
//! each time it is listening again, since notifications sent meanwhile are lost.
//! `capability::follow` does the reading (and says why it also checks the registrations every
//! `cluster.poll_millis`).

use std::sync::Arc;

use crate::run::id::RunId;
use crate::run::operator::Actor;
use crate::services::Services;

/// The channel on which a commit tells the other nodes that a run changed (payload:
/// [`changed_payload`]).
pub const CHANGED: &str = "flexrun_runs";

/// The channel on which a node asks the run's driver to stop it (payload: [`StopNotice`]).
pub const STOP: &str = "flexrun_stop";

/// A cancel sent from another node.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopNotice {
    pub run_id: String,
    pub actor: Actor,
}

/// Longest notification payload PostgreSQL takes is 8,000 bytes: an actor's note is cut to fit.
const MAX_NOTE: usize = 2_000;

impl StopNotice {
    /// The payload asking `run_id`'s driver to cancel it for `actor`.
    pub fn payload(run_id: &RunId, actor: &Actor) -> String {
        let mut actor = actor.clone();
        actor.note = actor.note.map(|note| crate::excerpt::excerpt(&note, MAX_NOTE).to_string());
        let operator = actor.operator.as_ref().map(|o| o.to_string().len()).unwrap_or_default();
        if operator > MAX_NOTE {
            actor.operator = None;
        }
        let notice = Self { run_id: run_id.to_string(), actor };
        serde_json::to_string(&notice).unwrap_or_default()
    }
}

/// Starts this node's listener, and what follows the capability registrations stored
/// (PostgreSQL only): they run until the process ends.
pub fn listen(services: &Arc<Services>) {
    #[cfg(feature = "postgres")]
    if services.claims.leasing().is_some() {
        let every = std::time::Duration::from_millis(services.settings.cluster.poll_millis);
        services.runtime.spawn(crate::capability::follow(services.registry.clone(), every));
        services.runtime.spawn(listener::run(services.clone()));
    }
    #[cfg(not(feature = "postgres"))]
    let _ = services;
}

/// The payload of a [`CHANGED`] notification: `<run id> <ms since the epoch>`.
pub fn changed_payload(run_id: &str) -> String {
    format!("{run_id} {}", chrono::Utc::now().timestamp_millis())
}

#[cfg(feature = "postgres")]
mod listener {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::sync::mpsc;
    use tokio_postgres::AsyncMessage;

    use super::{CHANGED, STOP, StopNotice};
    use crate::capability::REGISTRATIONS;
    use crate::events::BusMessage;
    use crate::run::id::RunId;
    use crate::services::Services;

    /// Listens, polls, and connects again whenever the connection drops.
    pub(super) async fn run(services: Arc<Services>) {
        let poll = Duration::from_millis(services.settings.cluster.poll_millis);
        loop {
            match session(&services, poll).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(error = %crate::excerpt::log(error), "LISTEN connection lost; polling until it is back");
                }
            }
            wake_followed(&services);
            tokio::time::sleep(poll).await;
        }
    }

    /// One connection: listens until it drops (`Err`), polling meanwhile.
    async fn session(services: &Services, poll: Duration) -> Result<(), tokio_postgres::Error> {
        let mut config: tokio_postgres::Config = services.settings.database_url.parse()?;
        // Named, so an operator (or a test) finds each node's listener in pg_stat_activity.
        let node = services.claims.leasing().map(|leasing| leasing.node.as_str()).unwrap_or_default();
        config.application_name(format!("flexrun-listener {node}"));
        let (client, mut connection) = config.connect(tokio_postgres::NoTls).await?;
        let (sender, mut notifications) = mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        let _ =
                            sender.send(Ok((notification.channel().to_string(), notification.payload().to_string())));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        let _ = sender.send(Err(error));
                        return;
                    }
                }
            }
        });
        client.batch_execute(&format!("LISTEN {CHANGED}; LISTEN {STOP}; LISTEN {REGISTRATIONS}")).await?;
        // Whatever was committed while no one listened.
        wake_followed(services);
        services.registry.reread();
        let mut polls = tokio::time::interval(poll);
        let outcome = loop {
            tokio::select! {
                notification = notifications.recv() => match notification {
                    Some(Ok((channel, payload))) => handle(services, &channel, &payload),
                    Some(Err(error)) => break Err(error),
                    None => break Ok(()),
                },
                _ = polls.tick() => {
                    wake_followed(services);
                    // A query on a dead connection fails: that is how a silent drop is noticed.
                    if let Err(error) = client.simple_query("").await {
                        break Err(error);
                    }
                }
            }
        };
        driver.abort();
        outcome
    }

    fn handle(services: &Services, channel: &str, payload: &str) {
        if channel == STOP {
            return stop(services, payload);
        }
        if channel == REGISTRATIONS {
            return services.registry.reread();
        }
        let (run_id, at) = payload.split_once(' ').unwrap_or((payload, ""));
        changed(services, run_id, at.parse().ok(), "notify");
    }

    /// A run changed on another node (`at`: when it was committed, in ms since the epoch, if known).
    pub(super) fn changed(services: &Services, run_id: &str, at: Option<i64>, how: &'static str) {
        let Ok(id) = RunId::parse(run_id) else { return };
        if services.claims.is_held(&id) {
            return; // Driven here: its frames were published as they were committed.
        }
        let lag = at.and_then(|at| u64::try_from(chrono::Utc::now().timestamp_millis() - at).ok());
        crate::telemetry::notification(how, lag.map(std::time::Duration::from_millis));
        services.bus.announce(run_id);
        services.bus.publish(run_id, BusMessage::Changed);
    }

    /// Wakes the followers of every run followed here that another node drives.
    pub(super) fn wake_followed(services: &Services) {
        for run_id in services.bus.followed() {
            changed(services, &run_id, None, "poll");
        }
    }

    /// Stops the run `payload` names if this node drives it.
    pub(super) fn stop(services: &Services, payload: &str) {
        let Ok(notice) = serde_json::from_str::<StopNotice>(payload) else { return };
        let Ok(run_id) = RunId::parse(&notice.run_id) else { return };
        if services.claims.stop(&run_id, &notice.actor).is_some() {
            tracing::info!(%run_id, principal = %notice.actor.principal, "cancel from another node");
        }
    }
}
