// The documents of the worker's API (api/openapi.yaml), as the client
// returns them: bytes (keys, values, checkpoints) are Buffers, not base64.

/** Bytes a caller may pass: a string is its UTF-8 encoding. */
export type Bytes = Uint8Array | string;

/** A task's role on a member: only active tasks are the worker's to run. */
export type Role = "active" | "learner" | "standby";

/** A member's state: joining, member, leaving, done. */
export type MemberState = "joining" | "member" | "leaving" | "done";

/** One task of a View. */
export interface TaskView {
  id: string;
  role: Role;
  stateful: boolean;
  /** Rises each time the task's owner changes; commits and releases send it. */
  epoch: number;
  /** Changelog messages this member's copy is behind (learners and standbys). */
  lag: number;
  /**
   * Actives: the input position to resume from, as last committed (absent:
   * from the beginning). Learners and standbys, from agents that give it: the
   * checkpoint their copy has applied so far, a hint of where the task's
   * input will resume.
   */
  checkpoint?: Buffer;
  /** The changelog sequence this member's copy has applied (stateful tasks). */
  seq?: number;
}

/** The member's assignment as its worker sees it (GET /assignment). */
export interface View {
  member: string;
  generation: number;
  /** Rises on every change of this view; pass it back as `after`. */
  version: number;
  state: MemberState;
  tasks: TaskView[];
  /** Active tasks to stop, commit and release, including any never started. */
  revoke: string[];
  /** The member may exit: a leave has handed every task over. */
  shutdown: boolean;
}

/** A key and value to put. */
export interface Put {
  key: Bytes;
  value: Bytes;
}

/** A key and value read from a task's state. */
export interface KV {
  key: Buffer;
  value: Buffer;
}

/** The body of POST /tasks/{id}/commit. */
export interface CommitRequest {
  puts?: readonly Put[];
  deletes?: readonly Bytes[];
  /** The input position this commit reaches; absent or empty keeps the previous one. */
  checkpoint?: Bytes;
  /** The task's epoch; always send it (Task.commit does). */
  epoch?: number;
}

/** An acknowledged commit: it is in the changelog and the agent's store. */
export interface CommitResult {
  task: string;
  /** The commit's changelog sequence. */
  seq: number;
  epoch: number;
}

/** An acknowledged release. */
export interface ReleaseResult {
  task: string;
  epoch: number;
  /** The changelog sequence of the task's last commit on this member. */
  seq: number;
}

/** What a scan reads: keys within prefix, from start on, at most limit of them. */
export interface ScanOptions {
  prefix?: Bytes;
  start?: Bytes;
  /** At most this many items (all of them when absent or 0). */
  limit?: number;
}

/** One page of a scan; next, when set, is the start of the following page. */
export interface ScanPage {
  items: KV[];
  next?: Buffer;
}

/** One learner's or standby's progress on a task. */
export interface LearnerProgress {
  task: string;
  member: string;
  role: Role;
  applied: number;
  end: number;
  lag: number;
  lagBytes: number;
  replayed: number;
  /** Messages per second. */
  rate: number;
  /** Nanoseconds. */
  eta: number;
  updated: string;
}

/** The progress of a graceful leave (POST and GET /leave). */
export interface LeaveStatus {
  state: MemberState;
  started?: string;
  remaining: string[];
  learners?: LearnerProgress[];
  shutdown: boolean;
}

/** One member of a GroupView. */
export interface MemberView {
  id: string;
  addr?: string;
  zone?: string;
  capacity: number;
  state: MemberState | "dead";
  active: string[];
  learning?: string[];
  standby?: string[];
  worker?: "attached" | "detached" | "lost";
  workerSince?: string;
}

/** One task of a GroupView. */
export interface GroupTask {
  id: string;
  stateful: boolean;
  active: string;
  epoch: number;
  revoking?: string;
  learners?: string[];
  standbys?: string[];
  snapshotSeq?: number;
  snapshotAge?: number;
}

/** The whole group as one member sees it (GET /group). */
export interface GroupView {
  group: string;
  generation: number;
  leader: string;
  members: MemberView[];
  tasks: GroupTask[];
  progress?: LearnerProgress[];
}
