//! Flow control (docs/protocol.md §12): credit the client spends on inbound envelopes
//! and gets back in batches, credit the client grants for outbound envelopes,
//! and paused channels.

use crate::hash::{FastMap, FastSet};

use crate::protocol::Channel;

/// Most channel names tracked per session; envelopes on further custom
/// channels are counted on their type's default channel, so a client cannot
/// grow this table without bound.
const MAX_TRACKED_CHANNELS: usize = 32;

/// Messages and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Amount {
    pub(crate) messages: u64,
    pub(crate) bytes: u64,
}

/// Credit owed back to the client for one channel.
#[derive(Debug, Default)]
struct Inbound {
    /// Credit the client still has (strict mode enforces it).
    credit: Amount,
    /// Handled but not yet returned.
    debt: Amount,
}

/// The inbound side: credit per channel, returned in batches.
#[derive(Debug)]
pub(crate) struct InboundCredit {
    initial: Amount,
    batch: Amount,
    channels: FastMap<String, Inbound>,
}

/// What to do with one inbound envelope's credit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Owed {
    /// Nothing to send yet.
    Nothing,
    /// Return this much credit with a `FLOW_UPDATE` on this channel.
    Return(String, Amount),
}

impl InboundCredit {
    pub(crate) fn new(initial: Amount, batch: Amount) -> InboundCredit {
        InboundCredit {
            initial,
            batch,
            channels: FastMap::default(),
        }
    }

    /// What the client is owed, for a shared store to record: per channel
    /// with a debt or spent credit, `NAME debt_messages debt_bytes
    /// credit_messages credit_bytes`, `;`-separated. A session restored
    /// from it ([`InboundCredit::restore_owed`]) returns the credit the
    /// client spent here, and holds it to what it has left.
    #[cfg(any(test, feature = "redis"))]
    pub(crate) fn owed(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for (name, c) in &self.channels {
            if c.debt == Amount::default() && c.credit == self.initial {
                continue;
            }
            if !out.is_empty() {
                out.push(';');
            }
            let _ = write!(
                out,
                "{name} {} {} {} {}",
                c.debt.messages, c.debt.bytes, c.credit.messages, c.credit.bytes
            );
        }
        out
    }

    /// Takes back what [`InboundCredit::owed`] recorded; what does not
    /// read as it writes is left out (the channel starts afresh).
    #[cfg(any(test, feature = "redis"))]
    pub(crate) fn restore_owed(&mut self, owed: &str) {
        for entry in owed.split(';') {
            if self.channels.len() >= MAX_TRACKED_CHANNELS {
                break;
            }
            let mut parts = entry.split(' ');
            let Some(name) = parts.next().filter(|n| !n.is_empty()) else {
                continue;
            };
            let numbers: Vec<u64> = parts.filter_map(|n| n.parse().ok()).collect();
            let [debt_m, debt_b, credit_m, credit_b] = numbers[..] else {
                continue;
            };
            self.channels.insert(
                name.to_owned(),
                Inbound {
                    credit: Amount {
                        messages: credit_m,
                        bytes: credit_b,
                    },
                    debt: Amount {
                        messages: debt_m,
                        bytes: debt_b,
                    },
                },
            );
        }
    }

    /// The channel name an envelope is counted on.
    pub(crate) fn tracked<'a>(&self, channel: &'a str, fallback: &'a str) -> &'a str {
        if self.channels.contains_key(channel) || self.channels.len() < MAX_TRACKED_CHANNELS {
            channel
        } else {
            fallback
        }
    }

    fn entry(&mut self, channel: &str) -> &mut Inbound {
        // Look up first: allocating the key for every envelope would cost more
        // than the bookkeeping itself.
        if !self.channels.contains_key(channel) {
            let initial = self.initial;
            self.channels.insert(
                channel.to_owned(),
                Inbound {
                    credit: initial,
                    debt: Amount::default(),
                },
            );
        }
        self.channels.get_mut(channel).expect("inserted above")
    }

    /// Strict mode: whether the client had credit for an envelope of `bytes`.
    pub(crate) fn has_credit(&mut self, channel: &str, bytes: u64) -> bool {
        let entry = self.entry(channel);
        entry.credit.messages >= 1 && entry.credit.bytes >= bytes
    }

    /// Records a handled envelope; says when a batch of credit is due back.
    /// `returns` is whether the client gets `FLOW_UPDATE`s; without them the
    /// debt is settled silently (and credit restored, outside strict mode).
    pub(crate) fn handled(
        &mut self,
        channel: &str,
        bytes: u64,
        returns: bool,
        strict: bool,
    ) -> Owed {
        let batch = self.batch;
        let entry = self.entry(channel);
        entry.credit.messages = entry.credit.messages.saturating_sub(1);
        entry.credit.bytes = entry.credit.bytes.saturating_sub(bytes);
        // Client-supplied sizes: saturating, never an overflow (docs/protocol.md §18.1).
        entry.debt.messages = entry.debt.messages.saturating_add(1);
        entry.debt.bytes = entry.debt.bytes.saturating_add(bytes);
        if entry.debt.messages < batch.messages && entry.debt.bytes < batch.bytes {
            return Owed::Nothing;
        }
        let debt = std::mem::take(&mut entry.debt);
        if returns || !strict {
            entry.credit.messages = entry.credit.messages.saturating_add(debt.messages);
            entry.credit.bytes = entry.credit.bytes.saturating_add(debt.bytes);
        }
        if returns {
            Owed::Return(channel.to_owned(), debt)
        } else {
            Owed::Nothing
        }
    }
}

/// The outbound side: paused channels and the credit the client granted.
#[derive(Debug, Default)]
pub(crate) struct OutboundGate {
    paused: FastSet<Channel>,
    /// Credit granted by the client, per channel, once it advertised some.
    credit: FastMap<Channel, Amount>,
    /// The client's advertised initial credit, for channels not seen yet.
    initial: Option<Amount>,
}

impl OutboundGate {
    /// `PAUSE_CHANNEL`: `SYSTEM` cannot be paused; unknown names are ignored.
    pub(crate) fn pause(&mut self, channel: &str) {
        if let Some(c) = Channel::parse(channel).filter(|c| *c != Channel::System) {
            self.paused.insert(c);
        }
    }

    /// `RESUME_CHANNEL`.
    pub(crate) fn resume(&mut self, channel: &str) {
        if let Some(c) = Channel::parse(channel) {
            self.paused.remove(&c);
        }
    }

    /// The paused channels' names, sorted, comma-separated (what a shared
    /// store records).
    #[cfg(feature = "redis")]
    pub(crate) fn paused_names(&self) -> String {
        let mut names: Vec<&str> = self.paused.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.join(",")
    }

    /// Lifts every pause (graceful shutdown: the last envelopes must go out).
    pub(crate) fn resume_all(&mut self) {
        self.paused.clear();
    }

    /// The client's `HAI` advertised its own initial credit.
    pub(crate) fn advertise(&mut self, initial: Amount) {
        self.initial = Some(initial);
    }

    /// A `FLOW_UPDATE` from the client adds credit.
    pub(crate) fn grant(&mut self, channel: &str, add: Amount) {
        if let Some(c) = Channel::parse(channel) {
            let initial = self.initial.unwrap_or_default();
            let credit = self.credit.entry(c).or_insert(initial);
            credit.messages = credit.messages.saturating_add(add.messages);
            credit.bytes = credit.bytes.saturating_add(add.bytes);
        }
    }

    /// Whether an envelope on `channel` may be committed now. Credit holds
    /// envelopes back only in strict mode, and never on `SYSTEM`.
    pub(crate) fn open(&self, channel: Channel, strict: bool) -> bool {
        if self.paused.contains(&channel) {
            return false;
        }
        if !strict || channel == Channel::System {
            return true;
        }
        match self.credit.get(&channel).copied().or(self.initial) {
            Some(credit) => credit.messages >= 1,
            None => true, // the client advertised no credit: nothing to honour
        }
    }

    /// Spends credit for a committed envelope (tracked even when not enforced).
    pub(crate) fn spend(&mut self, channel: Channel, bytes: u64) {
        if let Some(initial) = self.initial {
            let credit = self.credit.entry(channel).or_insert(initial);
            credit.messages = credit.messages.saturating_sub(1);
            credit.bytes = credit.bytes.saturating_sub(bytes);
        }
    }

    /// Whether anything is paused (commit order then needs a scan).
    pub(crate) fn any_paused(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Whether strict credit could hold something back.
    pub(crate) fn has_credit_limits(&self) -> bool {
        self.initial.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: Amount = Amount {
        messages: 5,
        bytes: 262_144,
    };

    #[test]
    fn credit_returns_every_five_messages() {
        let mut c = InboundCredit::new(
            Amount {
                messages: 1000,
                bytes: 1 << 20,
            },
            BATCH,
        );
        for _ in 0..4 {
            assert_eq!(c.handled("USER", 100, true, false), Owed::Nothing);
        }
        assert_eq!(
            c.handled("USER", 100, true, false),
            Owed::Return(
                "USER".into(),
                Amount {
                    messages: 5,
                    bytes: 500
                }
            )
        );
        // A big envelope returns credit at once.
        assert_eq!(
            c.handled("AGENT", 300_000, true, false),
            Owed::Return(
                "AGENT".into(),
                Amount {
                    messages: 1,
                    bytes: 300_000
                }
            )
        );
        // Without FLOW_UPDATEs the debt is settled silently.
        for _ in 0..5 {
            assert_eq!(c.handled("SYSTEM", 1, false, false), Owed::Nothing);
        }
    }

    #[test]
    fn strict_mode_runs_out_without_returns() {
        let mut c = InboundCredit::new(
            Amount {
                messages: 6,
                bytes: 1 << 20,
            },
            BATCH,
        );
        for _ in 0..6 {
            assert!(c.has_credit("USER", 10));
            c.handled("USER", 10, false, true);
        }
        assert!(
            !c.has_credit("USER", 10),
            "no FLOW_UPDATE was sent, so no credit came back"
        );
        let mut c = InboundCredit::new(
            Amount {
                messages: 6,
                bytes: 1 << 20,
            },
            BATCH,
        );
        for _ in 0..50 {
            assert!(c.has_credit("USER", 10));
            c.handled("USER", 10, true, true);
        }
    }

    #[test]
    fn what_is_owed_survives_a_restore() {
        let initial = Amount {
            messages: 1000,
            bytes: 1 << 20,
        };
        let mut c = InboundCredit::new(initial, BATCH);
        assert_eq!(c.owed(), "", "nothing spent, nothing owed");
        for _ in 0..3 {
            c.handled("USER", 100, true, false);
        }
        let owed = c.owed();
        assert_eq!(owed, "USER 3 300 997 1048276");
        // Restored elsewhere: the next two envelopes complete the batch of
        // five, returned as if the session had never moved.
        let mut restored = InboundCredit::new(initial, BATCH);
        restored.restore_owed(&owed);
        assert_eq!(restored.handled("USER", 100, true, false), Owed::Nothing);
        assert_eq!(
            restored.handled("USER", 100, true, false),
            Owed::Return(
                "USER".into(),
                Amount {
                    messages: 5,
                    bytes: 500
                }
            )
        );
        // What does not read as written is left out.
        let mut lenient = InboundCredit::new(initial, BATCH);
        lenient.restore_owed("USER 1 2;AGENT x 1 2 3;;SYSTEM 1 1 1 1");
        assert_eq!(lenient.owed(), "SYSTEM 1 1 1 1");
    }

    #[test]
    fn channel_table_is_bounded() {
        let mut c = InboundCredit::new(
            Amount {
                messages: 10,
                bytes: 100,
            },
            BATCH,
        );
        for i in 0..100 {
            let name = format!("custom-{i}");
            let tracked = c.tracked(&name, "USER").to_owned();
            c.handled(&tracked, 1, false, false);
        }
        assert!(c.channels.len() <= MAX_TRACKED_CHANNELS + 1);
    }

    #[test]
    fn pause_resume_and_strict_outbound_credit() {
        let mut g = OutboundGate::default();
        g.pause("AGENT");
        g.pause("SYSTEM");
        g.pause("nonsense");
        assert!(!g.open(Channel::Agent, false));
        assert!(g.open(Channel::System, false));
        g.resume("AGENT");
        assert!(g.open(Channel::Agent, false));
        g.advertise(Amount {
            messages: 1,
            bytes: 1000,
        });
        assert!(g.open(Channel::Agent, true));
        g.spend(Channel::Agent, 10);
        assert!(
            !g.open(Channel::Agent, true),
            "strict: out of client credit"
        );
        assert!(g.open(Channel::Agent, false), "not strict: tracked only");
        g.grant(
            "AGENT",
            Amount {
                messages: 2,
                bytes: 100,
            },
        );
        assert!(g.open(Channel::Agent, true));
    }
}
