//! Diesel table definitions, matching `migrations/`.

diesel::table! {
    mcp_servers (server_id) {
        server_id -> Text,
        registration -> Text,
        source -> Text,
        registered_at -> Timestamp,
        updated_at -> Timestamp,
        tools -> Nullable<Text>,
    }
}

diesel::table! {
    capabilities (capability_id) {
        capability_id -> Text,
        version -> Text,
        agent_type -> Text,
        kind -> Text,
        registration -> Text,
        source -> Text,
        registered_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    runs (run_id) {
        run_id -> Text,
        status -> Text,
        objective -> Text,
        envelope -> Text,
        thread_id -> Nullable<Text>,
        correlation_id -> Text,
        plan_version -> Integer,
        planner_attempts -> Integer,
        goal_condition_replans -> Integer,
        replans -> Integer,
        result -> Nullable<Text>,
        error -> Nullable<Text>,
        created_at -> Timestamp,
        updated_at -> Timestamp,
        idempotency_key -> Nullable<Text>,
        request_hash -> Nullable<Text>,
        signal_replans -> Integer,
        policy_replans -> Integer,
        operator_replans -> Integer,
        post_condition_replans -> Integer,
        owner -> Nullable<Text>,
        parent_run_id -> Nullable<Text>,
        lease_owner -> Nullable<Text>,
        lease_epoch -> BigInt,
        lease_expires_at -> Nullable<Timestamp>,
        crash_attempts -> Integer,
        max_replans -> Nullable<Integer>,
        usage -> Nullable<Text>,
    }
}

diesel::table! {
    run_outputs (run_id, plan_version) {
        run_id -> Text,
        plan_version -> Integer,
        status -> Text,
        output -> Text,
        goal_condition_results -> Text,
        recorded_at -> Timestamp,
    }
}

diesel::table! {
    run_events (run_id, seq) {
        run_id -> Text,
        seq -> BigInt,
        event_type -> Text,
        frame -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    hitl_requests (request_id) {
        request_id -> Text,
        run_id -> Text,
        kind -> Text,
        subject -> Text,
        plan_version -> Integer,
        node_id -> Nullable<Text>,
        question -> Text,
        details -> Text,
        status -> Text,
        created_at -> Timestamp,
        closed_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    hitl_decisions (request_id) {
        request_id -> Text,
        run_id -> Text,
        decision -> Text,
        operator -> Nullable<Text>,
        note -> Nullable<Text>,
        feedback -> Nullable<Text>,
        payload -> Nullable<Text>,
        decided_at -> Timestamp,
        principal -> Nullable<Text>,
    }
}

diesel::table! {
    threads (thread_id) {
        thread_id -> Text,
        owner -> Nullable<Text>,
        metadata -> Text,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    thread_metadata (thread_id, key) {
        thread_id -> Text,
        key -> Text,
        value -> Text,
    }
}

diesel::table! {
    serving (id) {
        id -> Integer,
        held -> Bool,
    }
}

diesel::joinable!(thread_metadata -> threads (thread_id));

diesel::allow_tables_to_appear_in_same_query!(
    capabilities,
    mcp_servers,
    threads,
    thread_metadata,
    runs,
    run_outputs,
    run_events,
    hitl_requests,
    hitl_decisions
);
