// The exit statuses of a trainyard-rank process, as the worker reports them
// (RankState.exit_code) and the controller reads them. Header-only; no dependencies.
//
// Permanent or transient: a rank exits with kRankExitInputError when the job's own
// inputs are wrong — its spec as the engine reads it, its dataset (a missing or
// unreadable file, a bad header, a token >= model.vocab_size), or the weights named by
// checkpoint.initial_load_path. Those fail the same way on any worker at any time, so
// the controller fails the job at once instead of spending restart.max_restarts on
// retries that cannot succeed, and blames no worker. Everything else (a signal, an OOM,
// a lost peer, a collective timeout, a checkpoint write or read error) is transient: it
// may pass on another attempt or another machine, and restarts as configured.
#pragma once

namespace trainyard {

inline constexpr int kRankExitOk = 0;
inline constexpr int kRankExitError = 1;        // transient, or not known to be permanent
inline constexpr int kRankExitStall = 86;       // hang detected (a Stall event was written)
inline constexpr int kRankExitInputError = 87;  // permanent: the job's inputs are wrong
// Not a rank's exit: no process was started because the worker refused the Assign, its
// slots not being free (ranks the controller stopped counting had not ended yet). The
// worker reports it with RankState FAILED; the controller's bookkeeping was wrong, so
// the attempt is placed again without using a restart or blaming the worker.
inline constexpr int kRankExitRefused = 88;

}  // namespace trainyard
