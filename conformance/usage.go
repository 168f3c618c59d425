package conformance

import (
	"fmt"

	"github.com/eppkit/eppkit/conformance/harness"
)

// UsageText is the long help of `eppkit conformance`: what a run does, the targets, the fields of
// a --command template (harness.TargetEnvFields), the verdict and the exit codes (Judge), and the
// publication and results files. The library owns these, so the CLI only prints them.
var UsageText = fmt.Sprintf(`Run the eppkit conformance suite against an endpoint picker (EPP).

The harness starts a fleet of fake vLLM servers, tells the target EPP about them through the
endpoint source, waits until the target answers (gRPC health SERVING and an ext_proc stream that
answers with anything but a 503 refusal; what the answer holds is for the MUST tests to judge), then
runs every registered test of the selected profiles, printing each result as it finishes. A run
whose target was started writes its reports whatever happens next.

Profiles: EPP (MUST rules), EPP-Routing (routing behaviours, each under a feature you claim),
EPP-Production (rules any production EPP should meet, each under a feature you claim), Reference
(the reference EPP's own design).

Targets: reference (this binary's reference-epp), command (--command template, run as a process
with /bin/sh -c, killed at the end), address (an already running EPP at --address; exit 2 once
every connection has been refused for targetRefused, 5 s by default: nothing listens there).

Fields of the --command template (Go text/template):
%s
Verdict: every report prints each profile's result (success, partial, failure, interrupted) with
its counts (passed, failed, skipped — of them not applicable: a precondition unmet, never a
failure —, not supported: a feature not claimed is counted nowhere, as in gateway-api's reports). Exit codes: 0 the tests that ran passed (with --expect-failures: every
test that ran failed exactly as listed), 1 a test failed, the failures differ from the list, or no
selected test ran; 2 the harness or target could not start, the target stopped answering while
selected tests were still to run (dying in the last one leaves the exit code to the results), the run
was interrupted (also after a failure) or a report could not be written; 3 bad flags, including a
selection that cannot run anything (a --run-test whose profile or feature is not selected, a
--skip-tests name that would not run anyway, --publish-dir with a narrowed selection).
Connection mistakes (TLS against plaintext either way, an HTTP/1 or non-ext_proc server at the
address) are named, with the flag that fixes them.

--publish-dir writes the GIE publication layout (<dir>/<GIE version>/epp/<organization>-<project>/:
one <channel>-<version>-<mode>-<profile>-report.yaml per profile and a README.md with the results
table and a Reproduce section), ready to copy into GIE's conformance/reports/.

--results-file writes the run's machine-readable results (JSON, conformance.Results: the exit code,
the error, per-profile counts, per-test outcome, duration and message), whatever the run's end.`, harness.FormatTargetEnvFields())
