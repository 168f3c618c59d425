// The score-trace format shared by tools/gie-v1.5.0/score-parity (which writes traces with GIE
// v1.5.0) and tools/llmd-v0.7.1/prefix-replay (which replays them on GIE v1.4.0). A module of its
// own with no dependencies: each of those modules pins a different GIE version, so neither can
// import a package of the other (or of the main module, which would lift GIE to v1.5.0).
module github.com/eppkit/eppkit/tools/prefixtrace

go 1.26.0
