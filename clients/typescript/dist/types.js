// The documents of the worker's API (api/openapi.yaml), as the client
// returns them: bytes (keys, values, checkpoints) are Buffers, not base64.
export {};
