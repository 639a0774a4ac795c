//! What one log line is, before any rule reads it: a failure worth explaining (or
//! admitting not to understand), a frame of a Python traceback a logger labelled, or NCCL
//! passing an error code up its stack.

/// A line that reads like a failure: worth explaining or admitting not to understand.
pub(super) fn looks_like_error(text: &str) -> bool {
    if text.contains("NCCL WARN") {
        return true;
    }
    if text.contains("NCCL INFO") {
        // `NCCL INFO init.cc:1358 -> 3` propagates an error already reported by a WARN.
        return false;
    }
    let t = text.trim_start();
    if t.starts_with("File \"") || t.starts_with("frame #") || t.starts_with("Traceback") {
        return false;
    }
    if logged_message(text).is_some_and(is_traceback_body) {
        return false;
    }
    [
        "Error",
        "error:",
        "ERROR",
        " failed",
        "Failed",
        "FAILED",
        "Exception",
        "exception",
        "failure",
        "NCCL error",
        "timed out",
        "Timeout",
        "Abort",
        "Segmentation fault",
        "Killed",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// The message of a line a Python stack's logger or launcher labelled, without the labels:
/// Ray's actor label `(RayWorkerWrapper pid=5280, ip=10.0.0.2) `, PyTorch's `[rank0]:`, and
/// vLLM's and SGLang's logger header `ERROR 08-23 08:25:25 [file.py:226] ` (older releases:
/// `file.py:226] `). `None` for a line with none of them. vLLM prints every line of a worker's
/// traceback at level ERROR, so the header alone says nothing about the line.
fn logged_message(text: &str) -> Option<&str> {
    let mut rest = text;
    let mut labelled = false;
    for _ in 0..3 {
        let t = rest.trim_start();
        if let Some(end) = t
            .find(") ")
            .filter(|end| t.starts_with('(') && t[..*end].contains("pid="))
        {
            rest = &t[end + 2..];
        } else if let Some(end) = t
            .find("]:")
            .filter(|end| t.starts_with("[rank") && *end < 12)
        {
            rest = &t[end + 2..];
        } else {
            break;
        }
        labelled = true;
    }
    let t = rest.trim_start();
    let header = ["ERROR ", "WARNING ", "INFO ", "DEBUG "]
        .iter()
        .find_map(|level| t.strip_prefix(level))
        .filter(|after| {
            let b = after.as_bytes();
            b.len() > 2 && b[..2].iter().all(u8::is_ascii_digit) && b[2] == b'-'
        })
        .and_then(|after| {
            after
                .find("] ")
                .filter(|end| *end < 80)
                .map(|end| &after[end + 2..])
        });
    match header {
        Some(message) => Some(message),
        None if labelled => Some(rest),
        None => None,
    }
}

/// A labelled line's message that is part of a Python traceback: a frame, the code line under
/// it (indented), or the `^^^^` marks under that code.
fn is_traceback_body(message: &str) -> bool {
    let t = message.trim_start();
    t.starts_with("File \"")
        || t.starts_with("Traceback")
        || t.starts_with('^')
        || t.starts_with('~')
        || message.starts_with("  ")
}

/// `NCCL INFO file.cc:123 -> 2 [Proxy Thread]`: NCCL passing an error code up its stack. It
/// says that something failed (the WARN naming it may be missing from the log), not what.
pub(super) fn is_error_trace(text: &str) -> bool {
    if !text.contains("NCCL INFO") {
        return false;
    }
    let Some(at) = text.rfind(" -> ") else {
        return false;
    };
    let rest = &text[at + 4..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let tail = &rest[digits..];
    digits > 0 && &rest[..digits] != "0" && (tail.trim().is_empty() || tail.starts_with(" ["))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logger_labelled_traceback_lines_are_no_failures_of_their_own() {
        for line in [
            "ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597]   File \"/app/vllm/worker_base.py\", line 259, in init_device",
            "ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597]     self.worker.init_device()",
            "(VllmWorkerProcess pid=235) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226]     return GroupCoordinator(",
            "(RayWorkerWrapper pid=5280, ip=10.0.0.2) ERROR 04-26 01:59:07 worker_base.py:157]     ^^^^^^^^^^^^",
            "[rank0]:     raise RuntimeError(f\"NCCL error: {error_str}\")",
        ] {
            assert!(!looks_like_error(line), "{line}");
        }
        for line in [
            "ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597] WorkerProc failed to start.",
            "(VllmWorkerProcess pid=235) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226] RuntimeError: NCCL error: unhandled system error",
            "[rank0]: RuntimeError: NCCL error: invalid usage",
            "    raise RuntimeError(f\"NCCL error: {error_str}\")",
        ] {
            assert!(looks_like_error(line), "{line}");
        }
    }

    #[test]
    fn frames_and_code_are_no_failures_but_look_alike_lines_are() {
        let far = format!(
            "ERROR 10-13 {}] {}",
            "x".repeat(74),
            "  raise RuntimeError(x)"
        );
        for (line, error) in [
            // A frame or a stack line names where, not what, even with an error word in it.
            ("File \"train.py\", line 3, in main: Error", false),
            ("frame #3: c10d::ProcessGroupNCCL::Error + 0x4a5", false),
            ("Traceback (most recent call last): failed", false),
            // vLLM's header puts ERROR on every line of a traceback.
            (
                "ERROR 10-13 09:06:25 [x.py:597] Traceback (most recent call last):",
                false,
            ),
            ("ERROR 10-13 09:06:25 [x.py:597] ^^^^^^^^^^^^", false),
            ("ERROR 10-13 09:06:25 [x.py:597] ~~~~~~^^^^^^", false),
            // Not a label: no `pid=` in the parentheses, not `[rankN]:`, no date in the
            // header, or the header's end too far off: judged as they read.
            ("(see below)   raise RuntimeError('x')", true),
            ("[info]:   connection timed out", true),
            ("[rank1234567]:   raise RuntimeError(x)", true),
            (
                "ERROR 1x-13 09:06:25 [a.py:1]   raise RuntimeError(x)",
                true,
            ),
            (
                "ERROR 10:13 09:06:25 [a.py:1]   raise RuntimeError(x)",
                true,
            ),
            ("ERROR 10", true),
            (far.as_str(), true),
        ] {
            assert_eq!(looks_like_error(line), error, "{line}");
        }
    }

    #[test]
    fn nccl_passing_an_error_code_up_is_an_error_trace() {
        assert!(is_error_trace(
            "h:1:2 [2] NCCL INFO misc/socket.cc:567 -> 2"
        ));
        assert!(is_error_trace(
            "h:1:2 [4] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]"
        ));
        assert!(!is_error_trace(
            "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC"
        ));
        assert!(!is_error_trace("h:1:2 [0] NCCL INFO init.cc:1 -> 0"));
        assert!(!is_error_trace("h:1:2 [0] NCCL INFO init.cc:1 -> "));
    }
}
