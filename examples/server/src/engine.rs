//! One model's generation thread. It owns the ORT session (`ort`'s `Session::run` needs `&mut`), takes jobs from a
//! bounded queue, and advances up to `parallel` generations in turns, one graph run each per turn. Every user's
//! answer therefore progresses, and a second user does not wait for the first to finish before seeing a first
//! token (a long prompt's prefill runs in chunks, `generate::PREFILL_CHUNK`, with the others' turns between).
//! Tokens go to each job's channel as they are sampled. A job whose receiver is gone (the client disconnected or
//! the handler saw a stop string) is dropped at its next turn, and its KV cache is freed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use nibble_llama::generate::{Generation, Generator, Step};
use nibble_llama::model::Llama;
use nibble_llama::sampling::Sampler;
use tokio::sync::mpsc::UnboundedSender;

/// What a job's channel receives.
#[derive(Debug)]
pub enum Event {
    /// Generation started (the prefill is next): seconds the job waited in the queue.
    Started {
        queue_s: f64,
    },
    Token(u32),
    /// The last event of a job that ran to its end.
    Done(Generation),
    /// The last event of a job that failed.
    Failed(String),
}

/// One generation request.
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampler: Sampler,
    pub events: UnboundedSender<Event>,
    pub queued_at: Instant,
}

/// Counters the /metrics endpoint and the queue report.
#[derive(Debug, Default)]
pub struct Load {
    pub queued: AtomicUsize,
    pub active: AtomicUsize,
}

/// The handle the HTTP side holds.
pub struct Engine {
    jobs: Mutex<Option<SyncSender<Job>>>,
    pub load: Arc<Load>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The queue is full: try again later.
    Busy,
    /// The engine is shutting down.
    Closed,
}

impl Engine {
    /// Starts the generation thread for `llama`: at most `queue` jobs waiting, `parallel` generating.
    pub fn start(name: &str, llama: Llama, queue: usize, parallel: usize) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(queue);
        let load = Arc::new(Load::default());
        let l = load.clone();
        let thread = std::thread::Builder::new()
            .name(format!("engine-{name}"))
            .spawn(move || run(llama, rx, parallel.max(1), &l))?;
        Ok(Self { jobs: Mutex::new(Some(tx)), load, thread: Mutex::new(Some(thread)) })
    }

    /// Queues `job` without waiting.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let guard = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = guard.as_ref() else { return Err(Refused::Closed) };
        self.load.queued.fetch_add(1, Ordering::SeqCst);
        tx.try_send(job).map_err(|e| {
            self.load.queued.fetch_sub(1, Ordering::SeqCst);
            match e {
                TrySendError::Full(_) => Refused::Busy,
                TrySendError::Disconnected(_) => Refused::Closed,
            }
        })
    }

    /// Whether the generation thread is alive (false once it ended: after `shutdown`, or a panic in generation).
    pub fn is_running(&self) -> bool {
        self.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops taking jobs, lets the queued and running ones finish, and waits for the thread.
    pub fn shutdown(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

struct Running {
    generator: Generator,
    events: UnboundedSender<Event>,
}

fn run(mut llama: Llama, rx: Receiver<Job>, parallel: usize, load: &Load) {
    let mut active: Vec<Running> = Vec::new();
    let mut open = true;
    loop {
        // Admit jobs while there is room; block for one only when idle.
        while open && active.len() < parallel {
            let job = if active.is_empty() {
                match rx.recv() {
                    Ok(j) => j,
                    Err(_) => {
                        open = false;
                        break;
                    }
                }
            } else {
                match rx.try_recv() {
                    Ok(j) => j,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            };
            load.queued.fetch_sub(1, Ordering::SeqCst);
            if job.events.is_closed() {
                continue; // the client left while queued
            }
            match Generator::new(&llama, &job.prompt, job.max_tokens, job.sampler) {
                Ok(generator) => {
                    let _ = job.events.send(Event::Started { queue_s: job.queued_at.elapsed().as_secs_f64() });
                    active.push(Running { generator, events: job.events });
                }
                Err(e) => {
                    let _ = job.events.send(Event::Failed(format!("{e:#}")));
                }
            }
        }
        load.active.store(active.len(), Ordering::SeqCst);
        if active.is_empty() {
            if open {
                continue;
            }
            return;
        }
        // One turn: one graph run per generation, in arrival order.
        let mut i = 0;
        while i < active.len() {
            let r = &mut active[i];
            let outcome = if r.events.is_closed() {
                Turn::Drop // nobody listens: drop it and its cache
            } else {
                match r.generator.step(&mut llama) {
                    // a long prompt's prefill runs in chunks: the others take turns in between
                    Ok(Step::Prefill { .. }) => Turn::Continue,
                    Ok(Step::Token(id)) if r.events.send(Event::Token(id)).is_err() => Turn::Drop,
                    Ok(Step::Token(_)) if r.generator.stop().is_some() => Turn::Finished,
                    Ok(Step::Token(_)) => Turn::Continue,
                    Err(e) => {
                        let _ = r.events.send(Event::Failed(format!("{e:#}")));
                        Turn::Drop
                    }
                }
            };
            match outcome {
                Turn::Continue => i += 1,
                Turn::Drop => {
                    active.remove(i);
                }
                Turn::Finished => {
                    let r = active.remove(i);
                    let _ = r.events.send(Event::Done(r.generator.finish()));
                }
            }
        }
        load.active.store(active.len(), Ordering::SeqCst);
    }
}

enum Turn {
    Continue,
    Drop,
    Finished,
}
