-- Argo CD health check for brighter.dev/BoxTable.
-- Reads the kstatus conditions the operator writes: Ready, Reconciling and Stalled.
-- Argo CD runs this with Lua 5.1 semantics: keep to plain Lua 5.1.
local hs = {}

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

-- A condition written for an older generation says nothing about the current spec.
local function current(condition)
  if generation == nil or condition.observedGeneration == nil then
    return true
  end
  return condition.observedGeneration >= generation
end

local function find(conditions, conditionType)
  for _, condition in ipairs(conditions) do
    if condition.type == conditionType and current(condition) then
      return condition
    end
  end
  return nil
end

local function describe(condition, fallback)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  if condition.reason ~= nil and condition.reason ~= "" then
    return condition.reason
  end
  return fallback
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local observed = obj.status.observedGeneration
if observed == nil then
  observed = -1
end
if generation ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. string.format("%d", generation)
  return hs
end

local conditions = obj.status.conditions
if conditions == nil then
  conditions = {}
end

local stalled = find(conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled, "Stalled")
  return hs
end

local ready = find(conditions, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end

local reconciling = find(conditions, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling, "Reconciling")
  return hs
end

for _, condition in ipairs(conditions) do
  if condition.reason == "Suspended" and current(condition) then
    hs.status = "Suspended"
    hs.message = describe(condition, "Suspended")
    return hs
  end
end

hs.status = "Progressing"
if ready ~= nil then
  hs.message = describe(ready, "Waiting for the operator")
else
  hs.message = "Waiting for the operator"
end
return hs
