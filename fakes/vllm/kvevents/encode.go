package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// MediumGPU is the medium of every event: the fake's only cache tier (vLLM MEDIUM_GPU).
const MediumGPU = "GPU"

// EncodeBatch encodes b as vLLM's msgspec encoder writes a KVEventBatch
// (vllm/distributed/kv_events.py; msgspec structs with array_like=True, omit_defaults=True, and
// tag=True on the events), integers in their shortest msgpack form:
//
//	batch:            [ts float64 (unix seconds), [event...], data_parallel_rank int]
//	BlockStored:      ["BlockStored", [block_hash uint...], parent_block_hash uint|nil,
//	                   [token_id uint...], block_size int, lora_id int|nil, medium "GPU",
//	                   lora_name str|nil(, extra_keys [[str...]|nil...])]
//	BlockRemoved:     ["BlockRemoved", [block_hash uint], medium "GPU"]
//	AllBlocksCleared: ["AllBlocksCleared"]
//
// extra_keys (one entry per stored block) is written only when a block has extra keys (a LoRA
// request, or a cache salt on the prompt's first block); otherwise it keeps its default and is
// left out, as are the later optional fields (group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window), which the fake never sets.
//
// With mapFormat (llm-d-inference-sim's --use-vllm-map-event-format, vLLM after
// vllm-project/vllm#42892) each event is instead a map: {"type": <tag>, <field name>: value,
// ...} with the same fields in the same order; the batch stays positional, as the simulator
// writes it and llm-d-router v0.10.0 decodes it.
//
// Block hashes are vLLM's external hashes as integers (engine.VLLMBlockHasher).
func EncodeBatch(b engine.KVEventBatch, rank int, mapFormat bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	e := &batchEncoder{enc: enc, maps: mapFormat}
	e.arrayLen(3)
	e.err(enc.EncodeFloat64(float64(b.At.UnixNano()) / 1e9))
	e.arrayLen(len(b.Events))
	for i := range b.Events {
		e.event(&b.Events[i])
	}
	e.err(enc.EncodeInt(int64(rank)))
	return buf.Bytes(), e.first
}

type batchEncoder struct {
	enc   *msgpack.Encoder
	maps  bool
	first error
}

func (e *batchEncoder) err(err error) {
	if err != nil && e.first == nil {
		e.first = err
	}
}

func (e *batchEncoder) arrayLen(n int) { e.err(e.enc.EncodeArrayLen(n)) }

// field writes a field's name in map format (nothing in array format).
func (e *batchEncoder) field(name string) {
	if e.maps {
		e.err(e.enc.EncodeString(name))
	}
}

// open starts an event of tag with n fields after the tag.
func (e *batchEncoder) open(tag string, n int) {
	if e.maps {
		e.err(e.enc.EncodeMapLen(n + 1))
		e.err(e.enc.EncodeString("type"))
	} else {
		e.arrayLen(n + 1)
	}
	e.err(e.enc.EncodeString(tag))
}

func (e *batchEncoder) hashes(hs []uint64) {
	e.arrayLen(len(hs))
	for _, h := range hs {
		e.err(e.enc.EncodeUint(h))
	}
}

func (e *batchEncoder) event(ev *engine.KVEvent) {
	switch ev.Type {
	case engine.BlockStored:
		n := 7
		if ev.ExtraKeys != nil {
			n = 8
		}
		e.open(string(engine.BlockStored), n)
		e.field("block_hashes")
		e.hashes(ev.BlockHashes)
		e.field("parent_block_hash")
		if ev.HasParent {
			e.err(e.enc.EncodeUint(ev.ParentHash))
		} else {
			e.err(e.enc.EncodeNil())
		}
		e.field("token_ids")
		e.arrayLen(len(ev.TokenIDs))
		for _, t := range ev.TokenIDs {
			e.err(e.enc.EncodeUint(uint64(t)))
		}
		e.field("block_size")
		e.err(e.enc.EncodeInt(int64(ev.BlockSize)))
		e.field("lora_id")
		if ev.LoRAID != 0 {
			e.err(e.enc.EncodeInt(int64(ev.LoRAID)))
		} else {
			e.err(e.enc.EncodeNil())
		}
		e.field("medium")
		e.err(e.enc.EncodeString(MediumGPU))
		e.field("lora_name")
		if ev.LoRAName != "" {
			e.err(e.enc.EncodeString(ev.LoRAName))
		} else {
			e.err(e.enc.EncodeNil())
		}
		if ev.ExtraKeys != nil {
			e.field("extra_keys")
			e.arrayLen(len(ev.ExtraKeys))
			for _, k := range ev.ExtraKeys {
				if k == nil {
					e.err(e.enc.EncodeNil())
					continue
				}
				e.arrayLen(len(k))
				for _, s := range k {
					e.err(e.enc.EncodeString(s))
				}
			}
		}
	case engine.BlockRemoved:
		e.open(string(engine.BlockRemoved), 2)
		e.field("block_hashes")
		e.hashes(ev.BlockHashes)
		e.field("medium")
		e.err(e.enc.EncodeString(MediumGPU))
	default:
		e.open(string(engine.AllBlocksCleared), 0)
	}
}
